// Package compat checks that Manta's ray.io/v1 CRDs accept what KubeRay's accept: the same schema (compared with
// KubeRay's CRDs in ../shared/compat/kuberay/crds) and KubeRay's sample manifests, and that the admission rules
// Manta adds refuse bad input with messages that name the field.
package compat
