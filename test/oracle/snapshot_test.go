package oracle

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/builder"
)

var rayClusterGVK = schema.GroupVersionKind{Group: "ray.io", Version: "v1", Kind: "RayCluster"}

// runSample applies one sample to both sides, each in its own namespace of the pair ns, waits for both to settle and
// returns the differences.
func runSample(t *testing.T, ns string, s sample, sides ...side) []diff {
	ctx := context.Background()
	for _, o := range append(slices.Clone(s.extra), s.objs...) {
		for _, sd := range sides {
			u := o.DeepCopy()
			u.SetNamespace(sd.ns(ns))
			if err := sd.cl.Create(ctx, u); err != nil {
				t.Fatalf("%s: create %s %s: %v", sd.name, u.GetKind(), u.GetName(), err)
			}
		}
	}
	return settle(t, ns, sides...)
}

// settle waits until both sides have settled, then compares what they wrote. Settled: every RayCluster has the
// pods its spec asks for, all Running and Ready, and a ready status for its generation, every RayJob is past
// Initializing, and nothing compared changed for five seconds (events are written after the objects they are
// about, seconds later on a busy machine); or every Ray object has a status for its generation (after 45 seconds,
// whether or not) and nothing changed for 15 seconds (a spec whose pods cannot be created, a job waiting for a
// cluster that does not exist, a status one operator never writes for a spec change; 30 seconds when one side is
// ready and the other is not, 60 when their events differ); or two minutes passed. Never, short of those two minutes,
// while a RayJob is Running with its submitter Job finished (both operators fail it 30 s after the submitter
// finished, and a snapshot inside those 30 s compares a race) or a RayCluster is Suspending.
func settle(t *testing.T, ns string, sides ...side) []diff {
	snaps := make([]*snapshot, len(sides))
	digests := make([]string, len(sides))
	deadline := time.Now().Add(2 * time.Minute)
	stable := 0
	for {
		ready, touched, same, moving := true, true, true, false
		for i, sd := range sides {
			snaps[i] = takeSnapshot(t, sd, sd.ns(ns))
			d := snaps[i].digest(t)
			same = same && d == digests[i]
			digests[i] = d
			ready = ready && snaps[i].ready
			touched = touched && snaps[i].touched && snaps[i].terminating == 0
			moving = moving || snaps[i].moving
		}
		if same {
			stable++
		} else {
			stable = 0
		}
		// Events are written after what they are about, and on a loaded machine one operator's come many seconds
		// after the other's (KubeRay's recorder writes them one at a time behind its own queue): event sets that
		// differ get twice the longer quiet period before they count as a difference.
		// The same for one side ready and the other not: a busy operator (or the kwok behind it) can leave a cluster
		// or a job's submitter unchanged for more than the shorter quiet period on its way to where the other is.
		// Manta writes events at 2 a second while it is writing anything else (internal/operator/events.go), so with
		// every sample at once its events can come more than 30 s after KubeRay's: differing events wait 60 s.
		quiet := 30
		switch {
		case !maps.Equal(snaps[0].events, snaps[1].events):
			quiet = 120
		case snaps[0].ready != snaps[1].ready:
			quiet = 60
		}
		if !moving && ((ready && stable >= 10 && quiet == 30) || (stable >= quiet && (touched || time.Until(deadline) < 75*time.Second))) {
			if os.Getenv("ORACLE_DEBUG") != "" {
				t.Logf("%s: settled (ready %v) after %s", ns, ready, time.Since(deadline.Add(-2*time.Minute)).Round(time.Millisecond))
				for i := range snaps {
					t.Logf("%s %s: ready %v touched %v", ns, sides[i].name, snaps[i].ready, snaps[i].touched)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Logf("%s: not settled after two minutes (ready %v, touched %v, unchanged for %d polls)", ns, ready, touched, stable)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	return snaps[0].compare(snaps[1])
}

// snapshot is what one operator wrote into a namespace, normalised.
type snapshot struct {
	side    string
	pods    map[string][]map[string]any // by pod/[<cluster>/]<node-type>[:group]
	objects map[string]map[string]any   // Ray objects' status and metadata, Services, Jobs, RBAC
	events  map[string]bool             // <object> Type/Reason of the events about Ray objects
	ready   bool                        // every RayCluster ready with its pods, every RayJob past Initializing
	touched bool                        // every Ray object has a status written for its generation
	// terminating counts the Ray pods being deleted: a side whose pods are still going has not settled (its
	// operator may be waiting for them, as a suspending cluster does), however long nothing else changes.
	terminating int
	// moving: a RayJob is Running though its submitter Job finished (both operators end it within 30 s, KubeRay's
	// submitter-finished timeout), or a RayCluster is Suspending; no snapshot before those end is settled.
	moving bool
}

// digest renders the snapshot, pods of a key in a fixed order (a cache lists them in any order).
func (s *snapshot) digest(t *testing.T) string {
	pods := map[string][]string{}
	for k, ps := range s.pods {
		for _, p := range ps {
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			pods[k] = append(pods[k], string(b))
		}
		slices.Sort(pods[k])
	}
	b, err := json.Marshal([]any{pods, s.objects, s.events, s.terminating})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	uidRe  = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	timeRe = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$`)
	// inTextTimeRe is a time.DateTime inside a text.
	inTextTimeRe = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\b`)
)

var (
	rayJobGVK     = schema.GroupVersionKind{Group: "ray.io", Version: "v1", Kind: "RayJob"}
	rayServiceGVK = schema.GroupVersionKind{Group: "ray.io", Version: "v1", Kind: "RayService"}
)

func listRay(t *testing.T, sd side, ns string, gvk schema.GroupVersionKind) []unstructured.Unstructured {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := sd.cl.List(context.Background(), l, client.InNamespace(ns)); err != nil {
		t.Fatalf("%s: list %s: %v", sd.name, gvk.Kind, err)
	}
	return l.Items
}

// normaliser rewrites what differs by construction between the sides: the namespace, and the names and IDs the
// operators generate at random (<owner>-<5 random> for a RayJob's or RayService's cluster, <job>-<5 random> for a
// job ID). A generated name of another shape is left as it is, so the difference shows.
func normaliser(ns string, clusters, jobs, services []unstructured.Unstructured) (*strings.Replacer, map[string]string) {
	names := map[string]string{}
	var pairs []string
	generated := func(owner, name string) {
		if _, done := names[name]; !done && regexp.MustCompile(`^`+regexp.QuoteMeta(owner)+`-[a-z0-9]{5}$`).MatchString(name) {
			names[name] = owner + "-XXXXX"
			pairs = append(pairs, name, names[name])
		}
	}
	for _, c := range clusters {
		for _, o := range c.GetOwnerReferences() {
			if o.Kind == "RayJob" || o.Kind == "RayService" {
				generated(o.Name, c.GetName())
			}
		}
	}
	// The clusters the owners name, also once deleted (a Service may still select one).
	for _, o := range slices.Concat(jobs, services) {
		for _, path := range [][]string{{"status", "rayClusterName"}, {"status", "activeServiceStatus", "rayClusterName"}, {"status", "pendingServiceStatus", "rayClusterName"}} {
			if n, _, _ := unstructured.NestedString(o.Object, path...); n != "" {
				generated(o.GetName(), n)
			}
		}
	}

	for _, j := range jobs {
		id, _, _ := unstructured.NestedString(j.Object, "status", "jobId")
		spec, _, _ := unstructured.NestedString(j.Object, "spec", "jobId")
		if id != "" && id != spec && regexp.MustCompile(`^`+regexp.QuoteMeta(j.GetName())+`-[a-z0-9]{5}$`).MatchString(id) {
			pairs = append(pairs, id, j.GetName()+"-JOBID")
		}
	}
	return strings.NewReplacer(append(pairs, ns, "NS")...), names
}

func takeSnapshot(t *testing.T, sd side, ns string) *snapshot {
	ctx := context.Background()
	s := &snapshot{side: sd.name, pods: map[string][]map[string]any{}, objects: map[string]map[string]any{}, events: map[string]bool{}, ready: true, touched: true}
	clusters := listRay(t, sd, ns, rayClusterGVK)
	jobs := listRay(t, sd, ns, rayJobGVK)
	services := listRay(t, sd, ns, rayServiceGVK)
	repl, generated := normaliser(ns, clusters, jobs, services)
	name := func(n string) string {
		if g, ok := generated[n]; ok {
			return g
		}
		return n
	}
	toMap := func(o any) map[string]any {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]any{}
		if err := json.Unmarshal([]byte(repl.Replace(uidRe.ReplaceAllString(string(b), "UID"))), &m); err != nil {
			t.Fatal(err)
		}
		deleteFields(m, "metadata.uid", "metadata.resourceVersion", "metadata.creationTimestamp", "metadata.managedFields",
			"metadata.generation", "metadata.namespace", "metadata.deletionTimestamp", "metadata.deletionGracePeriodSeconds")
		return m
	}

	pods := &corev1.PodList{}
	if err := sd.cl.List(ctx, pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	podsOfCluster, readyOfCluster, readyWorkersOfCluster := map[string]int{}, map[string]int{}, map[string]int64{}
	for i := range pods.Items {
		p := &pods.Items[i]
		nodeType, ok := p.Labels[rayv1.LabelNodeType]
		if ok && p.DeletionTimestamp != nil {
			s.terminating++ // on its way out: not compared, but nothing has settled while it goes
		}
		if !ok || p.DeletionTimestamp != nil {
			continue // a submitter Job's pod (the Job is compared), or a pod on its way out
		}
		key := "pod/" + nodeType
		if len(clusters) > 1 {
			key = "pod/" + name(p.Labels[rayv1.LabelCluster]) + "/" + nodeType
		}
		if nodeType == rayv1.NodeTypeWorker {
			key += ":" + p.Labels[rayv1.LabelGroup]
		}
		ready := builder.PodRunningAndReady(p)
		podsOfCluster[p.Labels[rayv1.LabelCluster]]++
		if ready {
			readyOfCluster[p.Labels[rayv1.LabelCluster]]++
			if nodeType == rayv1.NodeTypeWorker {
				readyWorkersOfCluster[p.Labels[rayv1.LabelCluster]]++
			}
		}
		m := toMap(p)
		deleteFields(m, "metadata.name", "status", "spec.nodeName")
		dropServiceAccountToken(m)
		if v, ok := p.Labels[rayv1.LabelReplicaName]; ok {
			m["metadata"].(map[string]any)["labels"].(map[string]any)[rayv1.LabelReplicaName] = regexp.MustCompile(`-[a-z0-9]{5}$`).ReplaceAllString(v, "-XXXXX")
		}
		m["_ready"] = ready
		s.pods[key] = append(s.pods[key], m)
	}

	svcs := &corev1.ServiceList{}
	if err := sd.cl.List(ctx, svcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range svcs.Items {
		m := toMap(&svcs.Items[i])
		if svcs.Items[i].Spec.ClusterIP != corev1.ClusterIPNone {
			deleteFields(m, "spec.clusterIP", "spec.clusterIPs")
		}
		deleteFields(m, "spec.ports.nodePort", "status")
		s.objects["service/"+repl.Replace(svcs.Items[i].Name)] = m
	}
	for _, l := range []client.ObjectList{&corev1.ServiceAccountList{}, &rbacRoleList{}, &rbacRoleBindingList{}} {
		listInto(t, sd.cl, ns, l, s.objects, toMap, repl)
	}
	batch := &batchv1.JobList{}
	if err := sd.cl.List(ctx, batch, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	submitterDone := map[string]bool{} // RayJob name -> its submitter Job finished
	for i := range batch.Items {
		b := &batch.Items[i]
		m := toMap(b)
		deleteFields(m, "status")
		s.objects["job/"+repl.Replace(b.Name)] = m
		for _, c := range b.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				if owner := metav1.GetControllerOf(b); owner != nil && owner.Kind == "RayJob" {
					submitterDone[owner.Name] = true
				}
			}
		}
	}

	for i := range clusters {
		rc := &clusters[i]
		m := toMap(rc.Object)
		key := "raycluster/" + name(rc.GetName())
		status, _ := m["status"].(map[string]any)
		s.objects[key+".status"] = normaliseStatus(status)
		meta := map[string]any{"finalizers": m["metadata"].(map[string]any)["finalizers"]}
		if _, ok := generated[rc.GetName()]; ok {
			// Made by a RayJob or RayService: what the operator wrote is compared, not only what it did with it.
			for _, k := range []string{"name", "labels", "annotations", "ownerReferences"} {
				meta[k] = m["metadata"].(map[string]any)[k]
			}
			s.objects[key+".spec"] = m["spec"].(map[string]any)
		}
		s.objects[key+".metadata"] = meta
		state, _, _ := unstructured.NestedString(rc.Object, "status", "state")
		observed, _, _ := unstructured.NestedInt64(rc.Object, "status", "observedGeneration")
		want := wantPods(rc)
		s.touched = s.touched && observed == rc.GetGeneration()
		// The status has counted the ready workers: a progress-only status change (a replaced worker turning Ready)
		// can wait up to the status coalescing window (10 s and more while many clusters hold one) in Manta,
		// longer than the short quiet period.
		readyWorkers, _, _ := unstructured.NestedInt64(rc.Object, "status", "readyWorkerReplicas")
		s.ready = s.ready && observed == rc.GetGeneration() && podsOfCluster[rc.GetName()] == want && readyOfCluster[rc.GetName()] == want &&
			readyWorkers == readyWorkersOfCluster[rc.GetName()] && (state == "ready" || (want == 0 && state == "suspended"))
		// Suspending is a passage both operators end (Suspended once the pods are gone), however long a busy operator
		// takes to get back to the cluster after its pods went.
		s.moving = s.moving || conditionTrue(rc, "RayClusterSuspending")
	}
	for _, objs := range [][]unstructured.Unstructured{jobs, services} {
		for i := range objs {
			o := &objs[i]
			m := toMap(o.Object)
			key := strings.ToLower(o.GetKind()) + "/" + o.GetName()
			status, _ := m["status"].(map[string]any)
			s.objects[key+".status"] = normaliseStatus(status)
			s.objects[key+".metadata"] = map[string]any{"finalizers": m["metadata"].(map[string]any)["finalizers"]}
			s.touched = s.touched && len(status) > 0
			if o.GetKind() == "RayJob" {
				st, _, _ := unstructured.NestedString(o.Object, "status", "jobDeploymentStatus")
				s.ready = s.ready && st != "" && st != "Initializing"
				s.moving = s.moving || (st == "Running" && submitterDone[o.GetName()])
			}
		}
	}

	events := &corev1.EventList{}
	if err := sd.cl.List(ctx, events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		switch e.InvolvedObject.Kind {
		case "RayCluster":
			s.events["events "+e.Type+"/"+e.Reason] = true
		case "RayJob", "RayService":
			s.events["events/"+e.InvolvedObject.Kind+" "+e.Type+"/"+e.Reason] = true
		}
	}
	return s
}

// conditionTrue reports whether the object's status has the condition typ with status True.
func conditionTrue(o *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

// dropServiceAccountToken removes the projected token volume the API server adds to every pod (kube-api-access-<5
// random>), and its mounts.
func dropServiceAccountToken(pod map[string]any) {
	isToken := func(e any) bool {
		m, _ := e.(map[string]any)
		n, _ := m["name"].(string)
		return strings.HasPrefix(n, "kube-api-access-")
	}
	spec, _ := pod["spec"].(map[string]any)
	if vols, ok := spec["volumes"].([]any); ok {
		spec["volumes"] = slices.DeleteFunc(vols, isToken)
	}
	for _, k := range []string{"containers", "initContainers"} {
		cs, _ := spec[k].([]any)
		for _, c := range cs {
			cm := c.(map[string]any)
			if ms, ok := cm["volumeMounts"].([]any); ok {
				cm["volumeMounts"] = slices.DeleteFunc(ms, isToken)
			}
		}
	}
}

// normaliseStatus drops what changes with every write or comes from the API server's allocations, and turns
// every other timestamp into <time>, so that a time set on one side and not the other still shows.
func normaliseStatus(status map[string]any) map[string]any {
	if status == nil {
		return map[string]any{}
	}
	deleteFields(status, "lastUpdateTime", "stateTransitionTimes", "conditions.lastTransitionTime", "head.podIP", "head.podName", "head.serviceIP",
		"rayClusterStatus.lastUpdateTime", "rayClusterStatus.stateTransitionTimes", "rayClusterStatus.conditions.lastTransitionTime",
		"rayClusterStatus.head.podIP", "rayClusterStatus.head.podName", "rayClusterStatus.head.serviceIP")
	var walk func(v any) any
	walk = func(v any) any {
		switch t := v.(type) {
		case map[string]any:
			for k, e := range t {
				t[k] = walk(e)
			}
		case []any:
			for i, e := range t {
				t[i] = walk(e)
			}
		case string:
			if timeRe.MatchString(t) {
				return "<time>"
			}
			// A time inside a message (the submitter's finish time in KubeRay's submitter-finished timeout).
			return inTextTimeRe.ReplaceAllString(t, "<time>")
		}
		return v
	}
	walk(status)
	for _, eps := range []any{status["endpoints"], nestedAny(status, "rayClusterStatus", "endpoints")} {
		// Node ports are allocated at random by the API server.
		if eps, ok := eps.(map[string]any); ok {
			for k, v := range eps {
				if n, err := strconv.Atoi(fmt.Sprint(v)); err == nil && n >= 30000 && n <= 32767 {
					eps[k] = "<nodePort>"
				}
			}
		}
	}
	return status
}

func nestedAny(m map[string]any, path ...string) any {
	v, _, _ := unstructured.NestedFieldNoCopy(m, path...)
	return v
}

// wantPods is how many pods a RayCluster asks for: a head and each group's replicas (clamped to min and max) times
// its hosts; none when suspended.
func wantPods(rc *unstructured.Unstructured) int {
	if v, _, _ := unstructured.NestedBool(rc.Object, "spec", "suspend"); v {
		return 0
	}
	n := 1
	groups, _, _ := unstructured.NestedSlice(rc.Object, "spec", "workerGroupSpecs")
	for _, g := range groups {
		gm := g.(map[string]any)
		get := func(k string, def int64) int64 {
			v, ok, _ := unstructured.NestedInt64(gm, k)
			if !ok {
				return def
			}
			return v
		}
		if v, _, _ := unstructured.NestedBool(gm, "suspend"); v {
			continue
		}
		r := max(get("replicas", 0), get("minReplicas", 0))
		r = min(r, get("maxReplicas", 1<<31-1))
		n += int(r * max(get("numOfHosts", 1), 1))
	}
	return n
}

// compare lists what m (Manta) wrote differently from s (KubeRay).
func (s *snapshot) compare(m *snapshot) []diff {
	var out []diff
	for _, k := range slices.Sorted(maps.Keys(union(s.pods, m.pods))) {
		a, b := s.pods[k], m.pods[k]
		if len(a) != len(b) {
			out = append(out, diff{Object: k, Path: "count", KubeRay: fmt.Sprint(len(a)), Manta: fmt.Sprint(len(b))})
		}
		if len(a) == 0 || len(b) == 0 {
			continue
		}
		// Pods of one group are alike but for their replica labels: compare the first of each side.
		out = append(out, compareObjects(k, podRepresentative(a), podRepresentative(b))...)
	}
	for _, k := range slices.Sorted(maps.Keys(union(s.objects, m.objects))) {
		a, b := s.objects[k], m.objects[k]
		switch {
		case a == nil:
			out = append(out, diff{Object: k, Path: "exists", KubeRay: "false", Manta: "true"})
		case b == nil:
			out = append(out, diff{Object: k, Path: "exists", KubeRay: "true", Manta: "false"})
		default:
			out = append(out, compareObjects(k, a, b)...)
		}
	}
	for _, e := range slices.Sorted(maps.Keys(union(s.events, m.events))) {
		object, reason, _ := strings.Cut(e, " ")
		switch {
		case !m.events[e]:
			out = append(out, diff{Object: object, Path: reason, KubeRay: "recorded", Manta: "<absent>"})
		case !s.events[e]:
			out = append(out, diff{Object: object, Path: reason, KubeRay: "<absent>", Manta: "recorded"})
		}
	}
	return out
}

func union[V any](a, b map[string]V) map[string]bool {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}

func podRepresentative(ps []map[string]any) map[string]any {
	sorted := slices.Clone(ps)
	idx := func(p map[string]any) string {
		l, _ := p["metadata"].(map[string]any)["labels"].(map[string]any)
		return fmt.Sprint(l[rayv1.LabelReplicaIndex], "/", l[rayv1.LabelHostIndex])
	}
	slices.SortFunc(sorted, func(a, b map[string]any) int { return strings.Compare(idx(a), idx(b)) })
	p := maps.Clone(sorted[0])
	delete(p, "_ready")
	return p
}
