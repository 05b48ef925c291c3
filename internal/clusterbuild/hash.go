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

func hashedTemplate(t *corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	c := t.DeepCopy()
	c.Spec.Tolerations = nil
	c.Spec.SchedulingGates = nil
	return *c
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
