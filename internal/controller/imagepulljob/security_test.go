package imagepulljob

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
)

// TestSecuritySelectNodesPolicy: the operator's policy bounds the nodes a job's pullers reach, whatever the job
// selects or tolerates, and counts what it kept out.
func TestSecuritySelectNodesPolicy(t *testing.T) {
	all := nodes(
		makeNode("gpu").label("pool", "pullers").taint("nvidia.com/gpu", corev1.TaintEffectNoSchedule),
		makeNode("exec").label("pool", "pullers").taint("dedicated", corev1.TaintEffectNoExecute),
		makeNode("p1").label("pool", "pullers"),
		makeNode("p2").label("pool", "pullers").label("zone", "b"),
		makeNode("system").label("pool", "system"),
		makeNode("soft").label("pool", "pullers").taint("soft", corev1.TaintEffectPreferNoSchedule),
	)
	pullers := labels.SelectorFromSet(labels.Set{"pool": "pullers"})
	gpu := corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}
	cases := map[string]struct {
		job          *jobWrapper
		policy       Policy
		want         []string
		wantExcluded Excluded
	}{
		"default: tainted nodes are not targeted, PreferNoSchedule ignored": {
			job: makeJob("j"), want: []string{"p1", "p2", "soft", "system"}, wantExcluded: Excluded{Tainted: 2}},
		"the job tolerating a taint does not reach past the operator": {
			job: makeJob("j").tolerations(gpu), want: []string{"p1", "p2", "soft", "system"}, wantExcluded: Excluded{Tainted: 1}},
		"node selector: only matching nodes": {
			job: makeJob("j"), policy: Policy{NodeSelector: pullers}, want: []string{"p1", "p2", "soft"}, wantExcluded: Excluded{OutsideSelector: 1, Tainted: 2}},
		"node selector ANDs with the job's names": {
			job: makeJob("j").names("p2", "system"), policy: Policy{NodeSelector: pullers}, want: []string{"p2"}, wantExcluded: Excluded{OutsideSelector: 1}},
		"node selector ANDs with the job's labels": {
			job: makeJob("j").matchLabels(map[string]string{"zone": "b"}), policy: Policy{NodeSelector: labels.SelectorFromSet(labels.Set{"pool": "system"})},
			want: nil, wantExcluded: Excluded{OutsideSelector: 1}},
		"an allowed taint is tolerated": {
			job: makeJob("j"), policy: Policy{NodeSelector: pullers, Tolerations: []corev1.Toleration{gpu}}, want: []string{"gpu", "p1", "p2", "soft"},
			wantExcluded: Excluded{OutsideSelector: 1, Tainted: 1}},
		"the job narrows the allowed taints": {
			job: makeJob("j").tolerations(), policy: Policy{Tolerations: []corev1.Toleration{gpu}}, want: []string{"p1", "p2", "soft", "system"}},
		"tolerate all taints": {
			job: makeJob("j"), policy: Policy{TolerateAllTaints: true}, want: []string{"exec", "gpu", "p1", "p2", "soft", "system"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, excluded, err := SelectNodes(tc.job.obj(), all, nil, tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
			if excluded != tc.wantExcluded {
				t.Errorf("excluded %+v, want %+v", excluded, tc.wantExcluded)
			}
		})
	}
}

// TestSecurityPullerPods: the plan creates pullers only where the policy lets them go, with exactly the operator's
// priority class and tolerations (never the job's), deletes pullers on nodes the policy no longer allows, and says
// in a condition how many nodes it left out.
func TestSecurityPullerPods(t *testing.T) {
	all := nodes(
		makeNode("a").label("pool", "pullers"),
		makeNode("b").label("pool", "pullers"),
		makeNode("c").label("pool", "other"),
		makeNode("d").label("pool", "pullers").taint("nvidia.com/gpu", corev1.TaintEffectNoSchedule),
	)
	job := makeJob("j").always().parallelism(10).obj()
	job.Spec.PriorityClassName = "system-node-critical"
	job.Spec.Tolerations = nil // the job asks to tolerate every taint
	policy := Policy{NodeSelector: labels.SelectorFromSet(labels.Set{"pool": "pullers"}), PriorityClassName: "image-pullers"}
	// A puller from before the policy, on a node it now excludes.
	stale := pullerPod(job, "c", 1, t0, nil)
	p, err := computePlan(observed{job: job, nodes: all, pods: []corev1.Pod{stale}, now: t0.Add(time.Second), retryBase: time.Second,
		podOptions: PodOptions{Policy: policy}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a#1", "b#1"}, podsOf(p.create)); diff != "" {
		t.Errorf("created pullers (-want +got):\n%s", diff)
	}
	for _, pod := range p.create {
		if pod.Spec.PriorityClassName != "image-pullers" {
			t.Errorf("puller on %s has priority class %q, want the operator's image-pullers", pod.Spec.NodeName, pod.Spec.PriorityClassName)
		}
		if len(pod.Spec.Tolerations) != 0 {
			t.Errorf("puller on %s tolerates %+v; the operator allows no taint", pod.Spec.NodeName, pod.Spec.Tolerations)
		}
	}
	if !slices.ContainsFunc(p.delete, func(d *corev1.Pod) bool { return d.Spec.NodeName == "c" }) {
		t.Errorf("the puller on node c, outside the node selector, is not deleted: %v", podsOf(p.delete))
	}
	if p.status.Desired != 2 {
		t.Errorf("desired %d, want 2", p.status.Desired)
	}
	// The job's own class is reported as not used, not silently dropped.
	pc := meta.FindStatusCondition(p.status.Conditions, ConditionPriorityClassNotUsed)
	if pc == nil || !p.priorityClassChanged || !strings.Contains(pc.Message, `spec.priorityClassName "system-node-critical" is not used`) || !strings.Contains(pc.Message, `"image-pullers"`) {
		t.Errorf("PriorityClassNotUsed condition %+v (changed %v), want one naming spec.priorityClassName and the operator's class", pc, p.priorityClassChanged)
	}
	c := meta.FindStatusCondition(p.status.Conditions, ConditionNodesExcluded)
	want := "not pulling on 1 node(s) outside the operator's image-pull node selector and 1 node(s) with taints the operator does not let pullers tolerate"
	if c == nil || c.Message != want || c.Reason != ReasonOperatorPolicy || !p.excludedChanged {
		t.Errorf("NodesExcluded condition %+v (changed %v), want message %q", c, p.excludedChanged, want)
	}

	// The operator allows the GPU taint: the tainted node gets a puller that tolerates exactly that.
	gpu := corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	policy.Tolerations = []corev1.Toleration{gpu}
	p, err = computePlan(observed{job: job, nodes: all, now: t0, retryBase: time.Second, podOptions: PodOptions{Policy: policy}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a#1", "b#1", "d#1"}, podsOf(p.create)); diff != "" {
		t.Errorf("created pullers with the GPU taint allowed (-want +got):\n%s", diff)
	}
	for _, pod := range p.create {
		if !cmp.Equal(pod.Spec.Tolerations, []corev1.Toleration{gpu}) {
			t.Errorf("puller on %s tolerates %+v, want only the operator's %+v", pod.Spec.NodeName, pod.Spec.Tolerations, gpu)
		}
	}
}

func TestSecurityParseTolerations(t *testing.T) {
	got, err := ParseTolerations([]string{"nvidia.com/gpu", "dedicated=ray:NoSchedule", "spot:NoExecute"})
	if err != nil {
		t.Fatal(err)
	}
	want := []corev1.Toleration{
		{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists},
		{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ray", Effect: corev1.TaintEffectNoSchedule},
		{Key: "spot", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tolerations (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", ":NoSchedule", "gpu:Sometimes", "bad key", "k=bad value"} {
		if _, err := ParseTolerations([]string{bad}); err == nil {
			t.Errorf("ParseTolerations(%q): no error", bad)
		}
	}
}
