// Package v1alpha1 contains the manta.dev/v1alpha1 API types (ImagePullJob).
// +kubebuilder:object:generate=true
// +groupName=manta.dev
package v1alpha1

//lint:file-ignore SA1019 kubebuilder's scheme.Builder: the API packages register with controller-runtime as every kubebuilder project does

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the objects in this package.
	GroupVersion = schema.GroupVersion{Group: "manta.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
