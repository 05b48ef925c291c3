package validation

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
)

// gcsBackend refuses, as KubeRay does, what does not belong to the chosen GCS backend: Redis settings and the
// operator's own env, volume and mount on the embedded (rocksdb) backend, whose head they would break or silently
// not reach; storage on the redis backend, which has no volume.
func gcsBackend(spec *rayv1.RayClusterSpec, path *field.Path) field.ErrorList {
	o := spec.GcsFaultToleranceOptions
	if o == nil {
		return nil
	}
	opts := path.Child("gcsFaultToleranceOptions")
	if o.Backend != rayv1.GcsFaultToleranceBackendRocksDB {
		if o.Storage != nil {
			return field.ErrorList{field.Forbidden(opts.Child("storage"), "storage only applies to the rocksdb backend")}
		}
		return nil
	}
	notRocksDB := "cannot be set when backend is rocksdb"
	var errs field.ErrorList
	if o.RedisAddress != "" {
		errs = append(errs, field.Forbidden(opts.Child("redisAddress"), notRocksDB))
	}
	if o.RedisUsername != nil {
		errs = append(errs, field.Forbidden(opts.Child("redisUsername"), notRocksDB))
	}
	if o.RedisPassword != nil {
		errs = append(errs, field.Forbidden(opts.Child("redisPassword"), notRocksDB))
	}
	if o.ExternalStorageNamespace != "" {
		errs = append(errs, field.Forbidden(opts.Child("externalStorageNamespace"), notRocksDB))
	}
	if s := o.Storage; s != nil && s.ClaimName != "" && (s.Size != nil || s.StorageClassName != nil || len(s.AccessModes) > 0) {
		errs = append(errs, field.Forbidden(opts.Child("storage", "claimName"),
			"claimName names an existing claim and cannot be set with size, storageClassName or accessModes, which describe the claim the operator creates"))
	}
	head := path.Child("headGroupSpec", "template", "spec")
	tmpl := &spec.HeadGroupSpec.Template.Spec
	ray := &tmpl.Containers[clusterbuild.RayContainerIndex]
	for _, name := range []string{clusterbuild.EnvGCSStorage, clusterbuild.EnvGCSStoragePath} {
		if slices.ContainsFunc(ray.Env, func(e corev1.EnvVar) bool { return e.Name == name }) {
			errs = append(errs, field.Forbidden(head.Child("containers").Index(clusterbuild.RayContainerIndex).Child("env").Key(name),
				"the operator sets it for the rocksdb backend"))
		}
	}
	for i, m := range ray.VolumeMounts {
		if m.Name == clusterbuild.GCSStorageVolumeName || m.MountPath == clusterbuild.GCSStorageMountPath {
			errs = append(errs, field.Forbidden(head.Child("containers").Index(clusterbuild.RayContainerIndex).Child("volumeMounts").Index(i),
				fmt.Sprintf("the operator mounts volume %q at %s for the rocksdb backend", clusterbuild.GCSStorageVolumeName, clusterbuild.GCSStorageMountPath)))
		}
	}
	for i, v := range tmpl.Volumes {
		if v.Name == clusterbuild.GCSStorageVolumeName {
			errs = append(errs, field.Forbidden(head.Child("volumes").Index(i),
				fmt.Sprintf("the operator adds volume %q for the rocksdb backend", clusterbuild.GCSStorageVolumeName)))
		}
	}
	return errs
}

// historyServer refuses, as KubeRay does, a collector that could not run or would upload nowhere: no image, an env
// var the operator sets, no STORAGE_BACKEND or a backend without the settings it needs, and a container of the
// collector's name in a template (the operator adds its own).
func historyServer(spec *rayv1.RayClusterSpec, path *field.Path) field.ErrorList {
	o := spec.HistoryServerOptions
	if o == nil {
		return nil
	}
	hp := path.Child("historyServerOptions")
	if o.CollectorOptions == nil {
		return field.ErrorList{field.Required(hp.Child("collectorOptions"), "the collector sidecar is what historyServerOptions configures")}
	}
	var errs field.ErrorList
	cp := hp.Child("collectorOptions")
	co := o.CollectorOptions
	if co.Image == "" {
		errs = append(errs, field.Required(cp.Child("image"), "the collector's image"))
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range co.Env {
		env[e.Name] = e
	}
	ep := cp.Child("env")
	for _, name := range clusterbuild.CollectorManagedEnv {
		if _, ok := env[name]; ok {
			errs = append(errs, field.Forbidden(ep.Key(name), "the operator sets it on the collector"))
		}
	}
	set := func(name string) bool { e, ok := env[name]; return ok && (e.Value != "" || e.ValueFrom != nil) }
	need := func(name, when string) {
		if !set(name) {
			errs = append(errs, field.Required(ep.Key(name), "needed when "+when))
		}
	}
	backend := env["STORAGE_BACKEND"].Value
	switch strings.ToUpper(backend) {
	case "":
		errs = append(errs, field.Required(ep.Key("STORAGE_BACKEND"), "the collector's storage, as a literal value (GCS, S3, AZUREBLOB, ALIYUNOSS, ...)"))
	case "GCS":
		need("GCS_BUCKET", "STORAGE_BACKEND is GCS")
	case "S3":
		need("S3_REGION", "STORAGE_BACKEND is S3")
	case "AZUREBLOB":
		switch mode := strings.ToLower(strings.TrimSpace(env["AZURE_STORAGE_AUTH_MODE"].Value)); mode {
		case "connection_string":
			need("AZURE_STORAGE_CONNECTION_STRING", "STORAGE_BACKEND is AZUREBLOB and AZURE_STORAGE_AUTH_MODE is connection_string")
		case "workload_identity", "default":
			need("AZURE_STORAGE_ACCOUNT_URL", "STORAGE_BACKEND is AZUREBLOB and AZURE_STORAGE_AUTH_MODE is "+mode)
		default:
			if !set("AZURE_STORAGE_CONNECTION_STRING") && !set("AZURE_STORAGE_ACCOUNT_URL") {
				errs = append(errs, field.Required(ep, "AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT_URL is needed when STORAGE_BACKEND is AZUREBLOB"))
			}
		}
	case "ALIYUNOSS":
		for _, name := range []string{"OSS_BUCKET", "OSS_ENDPOINT", "OSS_REGION"} {
			need(name, "STORAGE_BACKEND is ALIYUNOSS")
		}
	}
	named := func(ctrs []corev1.Container, p *field.Path) {
		for i, c := range ctrs {
			if c.Name == clusterbuild.CollectorContainerName {
				errs = append(errs, field.Forbidden(p.Index(i).Child("name"),
					fmt.Sprintf("%q is the collector the operator adds for historyServerOptions", clusterbuild.CollectorContainerName)))
			}
		}
	}
	named(spec.HeadGroupSpec.Template.Spec.Containers, path.Child("headGroupSpec", "template", "spec", "containers"))
	for i := range spec.WorkerGroupSpecs {
		named(spec.WorkerGroupSpecs[i].Template.Spec.Containers, path.Child("workerGroupSpecs").Index(i).Child("template", "spec", "containers"))
	}
	return errs
}
