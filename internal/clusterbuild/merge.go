package clusterbuild

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// Names of the containers of a default PodTemplate that are bases rather than containers to add (Flyte's names).
const (
	DefaultContainerName     = "default"
	PrimaryContainerName     = "primary"
	DefaultInitContainerName = "default-init"
	PrimaryInitContainerName = "primary-init"
)

// MergePodTemplate lays the user's template over the operator's default one with Kubernetes' strategic merge
// (the core/v1 patch metadata): maps merge, lists with a merge key (containers and env by name, volumeMounts by
// mountPath, ports by containerPort, ...) merge item by item, other lists (args, tolerations, nodeSelectorTerms)
// are the user's when the user has one. The user's template always wins; an env var, volume or probe the user
// sets replaces the default's whole, so one-of fields (value/valueFrom, emptyDir/configMap, exec/httpGet) are
// never combined.
//
// As in Flyte, the default's container "default" is the base of every user container and "primary" the base of
// the Ray container (index 0); "default-init" is the base of every init container and "primary-init" of the first.
// The default's other containers and init containers are added after the user's.
func MergePodTemplate(def *corev1.PodTemplateSpec, user *corev1.PodTemplateSpec) (*corev1.PodTemplateSpec, error) {
	base := def.DeepCopy()
	u := user.DeepCopy()
	var err error
	base.Spec.Containers, u.Spec.Containers, err = mergeContainers(base.Spec.Containers, u.Spec.Containers, DefaultContainerName, PrimaryContainerName)
	if err != nil {
		return nil, err
	}
	base.Spec.InitContainers, u.Spec.InitContainers, err = mergeContainers(base.Spec.InitContainers, u.Spec.InitContainers, DefaultInitContainerName, PrimaryInitContainerName)
	if err != nil {
		return nil, err
	}
	base.Spec.Volumes = slices.DeleteFunc(base.Spec.Volumes, func(v corev1.Volume) bool {
		return slices.ContainsFunc(u.Spec.Volumes, func(w corev1.Volume) bool { return w.Name == v.Name })
	})
	merged := &corev1.PodTemplateSpec{}
	if err := strategicMerge(base, u, merged); err != nil {
		return nil, fmt.Errorf("merge pod template: %w", err)
	}
	// The merge puts the user's containers after the default's extra ones: the Ray container must come first.
	merged.Spec.Containers = userFirst(merged.Spec.Containers, u.Spec.Containers)
	merged.Spec.InitContainers = userFirst(merged.Spec.InitContainers, u.Spec.InitContainers)
	return merged, nil
}

// mergeContainers takes the base containers (defName, primaryName) out of the default's list and returns the
// default's remaining containers and the user's containers, each already merged over its bases.
func mergeContainers(defs, users []corev1.Container, defName, primaryName string) (rest, merged []corev1.Container, err error) {
	var defaultCtr, primaryCtr *corev1.Container
	for i := range defs {
		switch defs[i].Name {
		case defName:
			defaultCtr = &defs[i]
		case primaryName:
			primaryCtr = &defs[i]
		default:
			rest = append(rest, defs[i])
		}
	}
	for i, c := range users {
		out := corev1.Container{Name: c.Name}
		if defaultCtr != nil {
			out = *defaultCtr.DeepCopy()
			out.Name = c.Name
		}
		if i == 0 && primaryCtr != nil {
			p := primaryCtr.DeepCopy()
			p.Name = c.Name
			if out, err = mergeContainer(out, *p); err != nil {
				return nil, nil, fmt.Errorf("merge %s into container %q: %w", primaryName, c.Name, err)
			}
		}
		if out, err = mergeContainer(out, c); err != nil {
			return nil, nil, fmt.Errorf("merge container %q: %w", c.Name, err)
		}
		merged = append(merged, out)
	}
	return rest, merged, nil
}

// mergeContainer merges over onto base; over's env vars and probes replace base's whole.
func mergeContainer(base, over corev1.Container) (corev1.Container, error) {
	base.Env = slices.DeleteFunc(base.Env, func(e corev1.EnvVar) bool {
		return slices.ContainsFunc(over.Env, func(o corev1.EnvVar) bool { return o.Name == e.Name })
	})
	if over.LivenessProbe != nil {
		base.LivenessProbe = nil
	}
	if over.ReadinessProbe != nil {
		base.ReadinessProbe = nil
	}
	if over.StartupProbe != nil {
		base.StartupProbe = nil
	}
	var out corev1.Container
	if err := strategicMerge(&base, &over, &out); err != nil {
		return out, err
	}
	// The default's env first, so the user's vars can refer to them ($(VAR) sees only earlier vars).
	if env := append(slices.Clone(base.Env), over.Env...); len(env) > 0 {
		out.Env = env
	}
	return out, nil
}

// strategicMerge applies over to base as a strategic merge patch of base's type, into out.
func strategicMerge[T any](base, over, out *T) error {
	b, err := json.Marshal(base)
	if err != nil {
		return err
	}
	o, err := json.Marshal(over)
	if err != nil {
		return err
	}
	m, err := strategicpatch.StrategicMergePatch(b, o, *new(T))
	if err != nil {
		return err
	}
	return json.Unmarshal(m, out)
}

// userFirst orders containers as the user listed them, then the default's extra ones in their order.
func userFirst(merged, users []corev1.Container) []corev1.Container {
	if len(merged) == 0 {
		return nil
	}
	out := make([]corev1.Container, 0, len(merged))
	for _, u := range users {
		if i := slices.IndexFunc(merged, func(c corev1.Container) bool { return c.Name == u.Name }); i >= 0 {
			out = append(out, merged[i])
		}
	}
	for _, c := range merged {
		if !slices.ContainsFunc(users, func(u corev1.Container) bool { return u.Name == c.Name }) {
			out = append(out, c)
		}
	}
	return out
}

// ValidateDefaultPodTemplate rejects a default template that cannot be merged.
func ValidateDefaultPodTemplate(t *corev1.PodTemplate) error {
	if t == nil {
		return fmt.Errorf("no template")
	}
	for _, list := range [][]corev1.Container{t.Template.Spec.Containers, t.Template.Spec.InitContainers} {
		seen := map[string]bool{}
		for _, c := range list {
			if c.Name == "" {
				return fmt.Errorf("template.spec: a container has no name")
			}
			if seen[c.Name] {
				return fmt.Errorf("template.spec: duplicate container %q", c.Name)
			}
			seen[c.Name] = true
		}
	}
	_, err := MergePodTemplate(&t.Template, &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "probe"}}, InitContainers: []corev1.Container{{Name: "probe-init"}},
	}})
	return err
}

// CheckDefaultTemplate merges the default template under the head's and every group's template, and names the first
// that cannot be merged. The controller calls it before building pods so that a failed merge is reported, never
// skipped.
func CheckDefaultTemplate(c *rayv1.RayCluster, def *corev1.PodTemplateSpec) error {
	if _, err := MergePodTemplate(def, &c.Spec.HeadGroupSpec.Template); err != nil {
		return fmt.Errorf("spec.headGroupSpec.template: %w", err)
	}
	for i := range c.Spec.WorkerGroupSpecs {
		if _, err := MergePodTemplate(def, &c.Spec.WorkerGroupSpecs[i].Template); err != nil {
			return fmt.Errorf("spec.workerGroupSpecs[%d].template: %w", i, err)
		}
	}
	return nil
}
