package builder

import (
	"encoding/json"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
)

// Names of the containers of a default PodTemplate that are bases rather than containers to add.
const (
	DefaultContainerName = "default"
	PrimaryContainerName = "primary"
)

// MergePodTemplate lays the user's template over the operator's default one. The default's container named
// "default" is the base of every user container, "primary" the base of the Ray container (index 0), and the rest
// of the default's pod spec the base of the user's. The user always wins: maps merge, lists append, and lists of
// named items (containers, env, volumes, ports...) merge item by item by name.
func MergePodTemplate(def *corev1.PodTemplateSpec, user *corev1.PodTemplateSpec) (*corev1.PodTemplateSpec, error) {
	base := def.DeepCopy()
	var defaultCtr, primaryCtr *corev1.Container
	var rest []corev1.Container
	for i := range base.Spec.Containers {
		switch c := &base.Spec.Containers[i]; c.Name {
		case DefaultContainerName:
			defaultCtr = c
		case PrimaryContainerName:
			primaryCtr = c
		default:
			rest = append(rest, *c)
		}
	}
	// Every user container starts from "default" (+ "primary" for the Ray container), then the user's fields.
	userCopy := user.DeepCopy()
	for i := range userCopy.Spec.Containers {
		c := userCopy.Spec.Containers[i]
		merged := corev1.Container{}
		if defaultCtr != nil {
			merged = *defaultCtr.DeepCopy()
		}
		if i == RayContainerIndex && primaryCtr != nil {
			if err := mergeInto(&merged, primaryCtr); err != nil {
				return nil, fmt.Errorf("merge primary container: %w", err)
			}
		}
		if err := mergeInto(&merged, &c); err != nil {
			return nil, fmt.Errorf("merge container %q: %w", c.Name, err)
		}
		merged.Name = c.Name
		userCopy.Spec.Containers[i] = merged
	}
	base.Spec.Containers = rest
	if err := mergeInto(base, userCopy); err != nil {
		return nil, fmt.Errorf("merge pod template: %w", err)
	}
	// Keep the user's container order: the Ray container must stay first.
	ordered := make([]corev1.Container, 0, len(base.Spec.Containers))
	byName := map[string]corev1.Container{}
	for _, c := range base.Spec.Containers {
		byName[c.Name] = c
	}
	for _, c := range userCopy.Spec.Containers {
		ordered = append(ordered, byName[c.Name])
		delete(byName, c.Name)
	}
	for _, c := range base.Spec.Containers {
		if _, ok := byName[c.Name]; ok {
			ordered = append(ordered, c)
		}
	}
	base.Spec.Containers = ordered
	return base, nil
}

// ValidateDefaultPodTemplate rejects a default template that cannot be merged.
func ValidateDefaultPodTemplate(t *corev1.PodTemplate) error {
	if t == nil {
		return fmt.Errorf("no template")
	}
	seen := map[string]bool{}
	for _, c := range t.Template.Spec.Containers {
		if c.Name == "" {
			return fmt.Errorf("template.spec.containers: a container has no name")
		}
		if seen[c.Name] {
			return fmt.Errorf("template.spec.containers: duplicate container %q", c.Name)
		}
		seen[c.Name] = true
	}
	_, err := MergePodTemplate(&t.Template, &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe"}}}})
	return err
}

// mergeInto merges over onto dst (both the same struct type) through their JSON form.
func mergeInto[T any](dst *T, over *T) error {
	a, err := toMap(dst)
	if err != nil {
		return err
	}
	b, err := toMap(over)
	if err != nil {
		return err
	}
	merged := mergeValues(a, b)
	js, err := json.Marshal(merged)
	if err != nil {
		return err
	}
	var out T
	if err := json.Unmarshal(js, &out); err != nil {
		return err
	}
	*dst = out
	return nil
}

func toMap(v any) (map[string]any, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	return m, json.Unmarshal(js, &m)
}

// mergeValues merges JSON values: objects key by key, lists of named objects by name, other lists appended
// (without repeating an item already there), scalars replaced by over.
func mergeValues(base, over any) any {
	switch o := over.(type) {
	case map[string]any:
		b, ok := base.(map[string]any)
		if !ok {
			return o
		}
		out := make(map[string]any, len(b)+len(o))
		for k, v := range b {
			out[k] = v
		}
		for k, v := range o {
			if bv, ok := out[k]; ok {
				out[k] = mergeValues(bv, v)
			} else {
				out[k] = v
			}
		}
		return out
	case []any:
		b, ok := base.([]any)
		if !ok {
			return o
		}
		return mergeLists(b, o)
	default:
		return over
	}
}

func mergeLists(base, over []any) []any {
	out := append([]any(nil), base...)
	for _, item := range over {
		if name, ok := itemName(item); ok {
			idx := -1
			for i, existing := range out {
				if n, ok := itemName(existing); ok && n == name {
					idx = i
					break
				}
			}
			if idx >= 0 {
				out[idx] = mergeValues(out[idx], item)
				continue
			}
		} else if containsValue(out, item) {
			continue
		}
		out = append(out, item)
	}
	return out
}

func itemName(v any) (string, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		return "", false
	}
	n, ok := m["name"].(string)
	return n, ok && n != ""
}

func containsValue(list []any, v any) bool {
	for _, x := range list {
		if reflect.DeepEqual(x, v) {
			return true
		}
	}
	return false
}
