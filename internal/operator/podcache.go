package operator

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
)

// podCacheDrops is the one description of what the operator's Ray pod cache drops of a pod, by Go field name
// (a nested set prunes a struct field, a pointer to one, or each element of a slice of them). Both ways of
// dropping are derived from it, so they cannot disagree:
//   - stripPod, the cache's transform, zeroes these fields of every cached pod (stripPodFields, generated from
//     this table into podcache_strip.go: `go test ./internal/operator -run TestStripPodFieldsGenerated -update`);
//   - the Ray pod watch drops them from each event's protobuf bytes before client-go decodes it (podPrune, the
//     protobuf field numbers read from the corev1 types' protobuf struct tags).
//
// What is kept is what the controllers read: the pod's labels, annotations, owner, restart policy, node, its
// containers' names and images, and of its status the phase, reason and message, the conditions, the pod IP and
// the containers' names, states, readiness and restarts. What is dropped is the bulk of a Ray pod (the ray start
// command, its environment, requests and limits, whose quantities were the largest item of the heap with
// thousands of pods cached), scheduling constraints, security contexts and the runtime's IDs.
//
// Code that reads a pod the operator lists or gets from its cache sees these fields empty: read them from the
// RayCluster's template instead, or, if a controller must read one from the pod, remove it here (and say why).
// Of the pod's conditions the cache keeps only podConditionsRead (see keepReadConditions).
var podCacheDrops = fieldSet{
	"ObjectMeta": {"ManagedFields": nil},
	"Spec": {
		"Volumes": nil, "Tolerations": nil, "Affinity": nil, "NodeSelector": nil, "TopologySpreadConstraints": nil,
		"SecurityContext": nil, "ImagePullSecrets": nil, "DNSConfig": nil, "HostAliases": nil, "Overhead": nil,
		"InitContainers": containerCacheDrops,
		"Containers":     containerCacheDrops,
	},
	"Status": {
		"HostIP": nil, "HostIPs": nil, "PodIPs": nil, "ResourceClaimStatuses": nil,
		"InitContainerStatuses": containerStatusCacheDrops,
		"ContainerStatuses":     containerStatusCacheDrops,
	},
}

// podConditionsRead are the only pod conditions the controllers read: Ready (a pod running and ready, the head's
// readiness in the status, the start phases' Ray-ready time) and PodScheduled (a scheduler's refusal, the start
// phases' scheduled time). The others a kubelet sets (PodReadyToStartContainers, Initialized, ContainersReady) were
// five conditions' slice, the largest part of a cached pod's status. A controller that reads another condition
// of a pod from the cache must add it here.
var podConditionsRead = map[corev1.PodConditionType]bool{corev1.PodReady: true, corev1.PodScheduled: true}

// keepReadConditions drops the conditions of p that are not podConditionsRead, into a slice of their own size (so
// the larger one is freed).
func keepReadConditions(p *corev1.Pod) {
	cs := p.Status.Conditions
	n := 0
	for _, c := range cs {
		if podConditionsRead[c.Type] {
			n++
		}
	}
	if n == len(cs) {
		return
	}
	var kept []corev1.PodCondition
	if n > 0 {
		kept = make([]corev1.PodCondition, 0, n)
		for _, c := range cs {
			if podConditionsRead[c.Type] {
				kept = append(kept, c)
			}
		}
	}
	p.Status.Conditions = kept
}

var (
	containerCacheDrops = fieldSet{
		"Command": nil, "Args": nil, "Env": nil, "EnvFrom": nil, "VolumeMounts": nil, "Ports": nil, "Resources": nil,
		"LivenessProbe": nil, "ReadinessProbe": nil, "StartupProbe": nil, "Lifecycle": nil, "SecurityContext": nil,
	}
	containerStatusCacheDrops = fieldSet{
		"ImageID": nil, "ContainerID": nil, "AllocatedResources": nil, "Resources": nil, "VolumeMounts": nil,
		"User": nil, "AllocatedResourcesStatus": nil,
	}
)

// fieldSet names fields of a Go struct: a field mapped to nil is dropped whole, one mapped to a set is pruned in
// turn.
type fieldSet map[string]fieldSet

// podPrune is derived from podCacheDrops when the package loads; a name that is not a field of its struct stops
// the program there (and every test of the package), so the table cannot silently name nothing.
var podPrune = func() prune {
	p, err := derivePrune(reflect.TypeFor[corev1.Pod](), podCacheDrops)
	if err != nil {
		panic("podCacheDrops: " + err.Error())
	}
	return p
}()

// derivePrune maps the names of set to the protobuf field numbers of the struct type t's fields.
func derivePrune(t reflect.Type, set fieldSet) (prune, error) {
	out := prune{}
	for _, name := range sortedNames(set) {
		sf, err := field(t, name)
		if err != nil {
			return nil, err
		}
		num, err := protobufNumber(sf)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", t, name, err)
		}
		var sub prune
		if s := set[name]; s != nil {
			et, err := structBehind(sf)
			if err != nil {
				return nil, err
			}
			if sub, err = derivePrune(et, s); err != nil {
				return nil, err
			}
		}
		out[num] = sub
	}
	return out, nil
}

// field is the struct type t's own (not promoted) field name.
func field(t reflect.Type, name string) (reflect.StructField, error) {
	sf, ok := t.FieldByName(name)
	if !ok || len(sf.Index) != 1 {
		return sf, fmt.Errorf("%s has no field %s", t, name)
	}
	return sf, nil
}

// protobufNumber reads a field's number from its protobuf struct tag ("bytes,7,rep,name=env,...").
func protobufNumber(sf reflect.StructField) (protowire.Number, error) {
	parts := strings.Split(sf.Tag.Get("protobuf"), ",")
	if len(parts) < 2 {
		return 0, fmt.Errorf("no protobuf tag")
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("protobuf tag %q: no field number", sf.Tag.Get("protobuf"))
	}
	return protowire.Number(n), nil
}

// structBehind is the struct type a pruned field holds: itself, or behind a pointer or a slice.
func structBehind(sf reflect.StructField) (reflect.Type, error) {
	t := sf.Type
	if t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("field %s (%s) holds no struct to prune", sf.Name, sf.Type)
	}
	return t, nil
}

func sortedNames(set fieldSet) []string {
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
