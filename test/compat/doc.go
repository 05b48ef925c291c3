// Package compat checks that Manta's ray.io/v1 CRDs accept what KubeRay's accept: the same schema (compared with
// the CRDs in config/crd/bases of the KubeRay module that hack/tools/kuberay/go.mod pins) and every sample manifest
// in that module's config/samples, and that the admission rules Manta adds refuse bad input with messages that name
// the field. The tests download the module into the Go module cache when it is not there yet.
package compat
