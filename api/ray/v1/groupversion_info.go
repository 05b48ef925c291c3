// Package v1 contains the ray.io/v1 API types (RayCluster, RayJob, RayService). They are wire-compatible with
// KubeRay's ray.io/v1 API: the same JSON field names, types, enums and defaults, so KubeRay manifests apply unchanged.
// +kubebuilder:object:generate=true
// +groupName=ray.io
package v1

//lint:file-ignore SA1019 kubebuilder's scheme.Builder: the API packages register with controller-runtime as every kubebuilder project does

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the objects in this package.
	GroupVersion = schema.GroupVersion{Group: "ray.io", Version: "v1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource returns a GroupResource for the given resource of this group.
func Resource(resource string) schema.GroupResource {
	return GroupVersion.WithResource(resource).GroupResource()
}
