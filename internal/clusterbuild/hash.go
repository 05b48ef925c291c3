package clusterbuild

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"strings"

	corev1 "k8s.io/api/core/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// TemplateHashes are the hashes of what the user asked each group's pods to be. Each pod is stamped with its own
// group's hash; a pod whose stamp differs from its group's current hash was built from an older template.
type TemplateHashes struct {
	Head    string
	Workers map[string]string // by group name
}

// For returns the current hash for a pod of the cluster, from its node-type and group labels; ok is false for a
// worker of a group that is no longer in the spec.
func (h TemplateHashes) For(labels map[string]string) (hash string, ok bool) {
	if labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead {
		return h.Head, true
	}
	hash, ok = h.Workers[labels[rayv1.LabelGroup]]
	return hash, ok
}

// Hashes computes the TemplateHashes of a spec.
//
// Only the user's inputs that shape the pods are hashed: the group's pod template without the fields Kueue and the
// autoscaler change (tolerations, schedulingGates), its rayStartParams, resources and labels, and for the head the
// autoscaler settings and rayVersion. Scaling fields (replicas, min/max, workersToDelete, suspend, numOfHosts),
// Service settings, upgradeStrategy and the other groups are left out, so scaling a group, annotating the head
// Service or adding a group recreates nothing. The generated pods are never hashed, so a new operator version that
// generates different pods does not trigger a recreate either.
func Hashes(spec *rayv1.RayClusterSpec) TemplateHashes {
	h := &spec.HeadGroupSpec
	out := TemplateHashes{Workers: make(map[string]string, len(spec.WorkerGroupSpecs))}
	out.Head = hashJSON(struct {
		Template       corev1.PodTemplateSpec   `json:"template"`
		RayStartParams map[string]string        `json:"rayStartParams,omitempty"`
		Resources      map[string]string        `json:"resources,omitempty"`
		Labels         map[string]string        `json:"labels,omitempty"`
		Autoscaling    *bool                    `json:"enableInTreeAutoscaling,omitempty"`
		Autoscaler     *rayv1.AutoscalerOptions `json:"autoscalerOptions,omitempty"`
		RayVersion     string                   `json:"rayVersion,omitempty"`
	}{hashedTemplate(&h.Template), h.RayStartParams, h.Resources, h.Labels, spec.EnableInTreeAutoscaling, spec.AutoscalerOptions, spec.RayVersion})
	for i := range spec.WorkerGroupSpecs {
		g := &spec.WorkerGroupSpecs[i]
		out.Workers[g.GroupName] = hashJSON(struct {
			Template       corev1.PodTemplateSpec `json:"template"`
			RayStartParams map[string]string      `json:"rayStartParams,omitempty"`
			Resources      map[string]string      `json:"resources,omitempty"`
			Labels         map[string]string      `json:"labels,omitempty"`
		}{hashedTemplate(&g.Template), g.RayStartParams, g.Resources, g.Labels})
	}
	return out
}

// hashedTemplate is t without the fields left out of the hash: a shallow copy, as it is only encoded.
func hashedTemplate(t *corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	c := *t
	c.Spec.Tolerations = nil
	c.Spec.SchedulingGates = nil
	return c
}

func hashJSON(v any) string {
	js, err := json.Marshal(v)
	if err != nil {
		// Types that decoded from the API server always encode again.
		panic(err)
	}
	sum := sha256.Sum256(js)
	return strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:20]))
}

// RecreatePlan is what a cluster's pods say about its templates: whether upgradeStrategy Recreate must replace
// them all, and which pods need the current hash stamped.
type RecreatePlan struct {
	// Recreate is set when a pod stamped by this Manta release carries a hash its group no longer has: the user
	// changed the template since the pod was built.
	Recreate bool
	// Stamp are the indexes of the pods to stamp with their group's current hash and this release: pods without a
	// hash (built by KubeRay or another operator), and, under Recreate, pods whose hash another Manta release
	// computed.
	Stamp []int
}

// PlanRecreate decides from the pods' stamps alone, never from what the pods hold: the hash covers only the user's
// spec (Hashes), and a hash is compared only with one the same release computed. A release whose hashing differs
// (a new API field, a new CRD default) takes the old pods over as current, as KubeRay's ray.io/kuberay-version
// guard does, so an operator upgrade or takeover never recreates a pod; a template change made while another
// release ran is applied by the next change. Pods of groups no longer in the spec are left to the caller.
func PlanRecreate(pods []corev1.Pod, h TemplateHashes, recreate bool) RecreatePlan {
	var p RecreatePlan
	for i := range pods {
		want, ok := h.For(pods[i].Labels)
		if !ok {
			continue
		}
		a := pods[i].Annotations
		have := a[AnnotationPodTemplateHash]
		switch {
		case have == "":
			p.Stamp = append(p.Stamp, i)
		case !recreate:
			// The hash is read only under Recreate: nothing to keep current.
		case !StampedByThisVersion(a):
			p.Stamp = append(p.Stamp, i)
		case have != want:
			return RecreatePlan{Recreate: true}
		}
	}
	return p
}
