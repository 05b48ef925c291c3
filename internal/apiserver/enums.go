package apiserver

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// KubeRay's v1 server marshals proto enums as numbers and accepts either the number or the name. These types do
// the same; enumNames gives the names in number order (for validation and the OpenAPI document).
type enum interface {
	enumNames() []string
}

func marshalEnum(v int32) ([]byte, error) { return []byte(strconv.Itoa(int(v))), nil }

// parseEnum reads a JSON number or name of an enum.
func parseEnum(b []byte, names []string) (int32, error) {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		for i, n := range names {
			if n == s {
				return int32(i), nil
			}
		}
		return 0, fmt.Errorf("unknown value %q", s)
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil || n < 0 || n >= int64(len(names)) {
		return 0, fmt.Errorf("must be one of %v or their numbers 0..%d", names, len(names)-1)
	}
	return int32(n), nil
}

func enumName(v int32, names []string) string {
	if v >= 0 && int(v) < len(names) {
		return names[v]
	}
	return strconv.Itoa(int(v))
}

// Environment is Cluster.environment.
type Environment int32

var environmentNames = []string{"DEV", "TESTING", "STAGING", "PRODUCTION"}

func (Environment) enumNames() []string            { return environmentNames }
func (e Environment) String() string               { return enumName(int32(e), environmentNames) }
func (e Environment) MarshalJSON() ([]byte, error) { return marshalEnum(int32(e)) }
func (e *Environment) UnmarshalJSON(b []byte) error {
	v, err := parseEnum(b, environmentNames)
	*e = Environment(v)
	return err
}

// VolumeType is Volume.volumeType.
type VolumeType int32

const (
	VolumePVC VolumeType = iota
	VolumeHostPath
	VolumeEphemeral
	VolumeConfigMap
	VolumeSecret
	VolumeEmptyDir
)

var volumeTypeNames = []string{"PERSISTENT_VOLUME_CLAIM", "HOST_PATH", "EPHEMERAL", "CONFIGMAP", "SECRET", "EMPTY_DIR"}

func (VolumeType) enumNames() []string            { return volumeTypeNames }
func (e VolumeType) String() string               { return enumName(int32(e), volumeTypeNames) }
func (e VolumeType) MarshalJSON() ([]byte, error) { return marshalEnum(int32(e)) }
func (e *VolumeType) UnmarshalJSON(b []byte) error {
	v, err := parseEnum(b, volumeTypeNames)
	*e = VolumeType(v)
	return err
}

// HostPathType is Volume.hostPathType.
type HostPathType int32

const (
	HostPathDirectory HostPathType = iota
	HostPathFile
)

var hostPathTypeNames = []string{"DIRECTORY", "FILE"}

func (HostPathType) enumNames() []string            { return hostPathTypeNames }
func (e HostPathType) MarshalJSON() ([]byte, error) { return marshalEnum(int32(e)) }
func (e *HostPathType) UnmarshalJSON(b []byte) error {
	v, err := parseEnum(b, hostPathTypeNames)
	*e = HostPathType(v)
	return err
}

// MountPropagationMode is Volume.mountPropagationMode.
type MountPropagationMode int32

const (
	PropagationNone MountPropagationMode = iota
	PropagationHostToContainer
	PropagationBidirectional
)

var mountPropagationNames = []string{"NONE", "HOSTTOCONTAINER", "BIDIRECTIONAL"}

func (MountPropagationMode) enumNames() []string            { return mountPropagationNames }
func (e MountPropagationMode) MarshalJSON() ([]byte, error) { return marshalEnum(int32(e)) }
func (e *MountPropagationMode) UnmarshalJSON(b []byte) error {
	v, err := parseEnum(b, mountPropagationNames)
	*e = MountPropagationMode(v)
	return err
}

// AccessMode is Volume.accessMode.
type AccessMode int32

const (
	AccessRWO AccessMode = iota
	AccessROX
	AccessRWX
)

var accessModeNames = []string{"RWO", "ROX", "RWX"}

func (AccessMode) enumNames() []string            { return accessModeNames }
func (e AccessMode) MarshalJSON() ([]byte, error) { return marshalEnum(int32(e)) }
func (e *AccessMode) UnmarshalJSON(b []byte) error {
	v, err := parseEnum(b, accessModeNames)
	*e = AccessMode(v)
	return err
}

// EnvSource is EnvValueFrom.source.
type EnvSource int32

const (
	EnvFromConfigMap EnvSource = iota
	EnvFromSecret
	EnvFromResourceField
	EnvFromField
)

var envSourceNames = []string{"CONFIGMAP", "SECRET", "RESOURCEFIELD", "FIELD"}

func (EnvSource) enumNames() []string            { return envSourceNames }
func (e EnvSource) MarshalJSON() ([]byte, error) { return marshalEnum(int32(e)) }
func (e *EnvSource) UnmarshalJSON(b []byte) error {
	v, err := parseEnum(b, envSourceNames)
	*e = EnvSource(v)
	return err
}
