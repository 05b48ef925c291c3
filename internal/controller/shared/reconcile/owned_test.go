package reconcile

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// configMaps is the kind the tests own: Data is what the owner writes; "immutable" in it cannot change in place.
func configMaps() *Owned[*corev1.ConfigMap] {
	return &Owned[*corev1.ConfigMap]{
		Kind: "ConfigMap",
		New:  func() *corev1.ConfigMap { return &corev1.ConfigMap{} },
		Sync: func(existing, desired *corev1.ConfigMap) (*corev1.ConfigMap, bool, bool) {
			if maps.Equal(existing.Data, desired.Data) {
				return nil, false, false
			}
			u := existing.DeepCopy()
			u.Data = desired.Data
			return u, true, existing.Data["immutable"] != desired.Data["immutable"]
		},
	}
}

var (
	owner     = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "owner", UID: "uid-owner"}}
	stranger  = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other", UID: "uid-other"}}
	podKind   = corev1.SchemeGroupVersion.WithKind("Pod")
	ownerRef  = *metav1.NewControllerRef(owner, podKind)
	otherRef  = *metav1.NewControllerRef(stranger, podKind)
	configKey = client.ObjectKey{Namespace: "ns", Name: "child"}
)

func desiredConfig(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "child", OwnerReferences: []metav1.OwnerReference{ownerRef}},
		Data:       data,
	}
}

func stored(data map[string]string, refs ...metav1.OwnerReference) *corev1.ConfigMap {
	c := desiredConfig(data)
	c.OwnerReferences = refs
	c.Annotations = map[string]string{"user": "note"}
	return c
}

// ownedEnv is a fake API server that counts writes, a Writer over it, and the reports of one call.
type ownedEnv struct {
	cl      client.Client
	w       Writer
	writes  []string
	reports []string
}

func newOwnedEnv(t *testing.T, existing *corev1.ConfigMap, fail map[string]error) *ownedEnv {
	t.Helper()
	e := &ownedEnv{}
	b := fake.NewClientBuilder().WithScheme(scheme.Scheme)
	if existing != nil {
		b = b.WithObjects(existing)
	}
	base := b.Build()
	answer := func(verb string, do func() error) error {
		e.writes = append(e.writes, verb)
		if err := fail[verb]; err != nil {
			return err
		}
		return do()
	}
	e.cl = interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return answer("create", func() error { return c.Create(ctx, obj, opts...) })
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return answer("update", func() error { return c.Update(ctx, obj, opts...) })
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			return answer("patch", func() error { return c.Patch(ctx, obj, p, opts...) })
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return answer("delete", func() error { return c.Delete(ctx, obj, opts...) })
		},
	})
	e.w = Writer{Client: e.cl, Reader: e.cl, Live: e.cl, Owner: owner}
	return e
}

func (e *ownedEnv) report(op Op, obj *corev1.ConfigMap, err error) {
	e.reports = append(e.reports, fmt.Sprintf("%s %s err=%v", opName[op], obj.Name, err != nil))
}

var opName = map[Op]string{Unchanged: "unchanged", Created: "created", Exists: "exists", Taken: "taken", Foreign: "foreign", Updated: "updated", Deleted: "deleted"}

func (e *ownedEnv) get(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	got := &corev1.ConfigMap{}
	if err := e.cl.Get(context.Background(), configKey, got); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestEnsureOwned(t *testing.T) {
	want := map[string]string{"k": "v", "immutable": "1"}
	drifted := map[string]string{"k": "edited", "immutable": "1"}
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "child", fmt.Errorf("the object has been modified"))
	tests := []struct {
		name     string
		existing *corev1.ConfigMap
		kind     func(*Owned[*corev1.ConfigMap])
		fail     map[string]error
		wantOp   Op
		wantErr  bool
		writes   []string
		reports  []string
		wantData map[string]string // the stored child's Data afterwards (nil: not checked)
		wantRefs []metav1.OwnerReference
	}{
		{name: "absent: created", wantOp: Created, writes: []string{"create"}, reports: []string{"created child err=false"},
			wantData: want, wantRefs: []metav1.OwnerReference{ownerRef}},
		{name: "as desired: no write", existing: stored(want, ownerRef), wantOp: Unchanged, wantData: want},
		{name: "drifted: put back by an update", existing: stored(drifted, ownerRef), wantOp: Updated,
			writes: []string{"update"}, reports: []string{"updated child err=false"}, wantData: want},
		{name: "drifted: put back by a patch", existing: stored(drifted, ownerRef), kind: func(k *Owned[*corev1.ConfigMap]) { k.Patch = true },
			wantOp: Updated, writes: []string{"patch"}, reports: []string{"updated child err=false"}, wantData: want},
		{name: "another controller's: refused, not written", existing: stored(drifted, otherRef), wantOp: Foreign,
			reports: []string{"foreign child err=false"}, wantData: drifted, wantRefs: []metav1.OwnerReference{otherRef}},
		{name: "another controller's is refused even where uncontrolled objects are adopted", existing: stored(drifted, otherRef),
			kind: adopting, wantOp: Foreign, reports: []string{"foreign child err=false"}, wantData: drifted},
		{name: "no controller, not adopting: refused", existing: stored(drifted), wantOp: Foreign,
			reports: []string{"foreign child err=false"}, wantData: drifted, wantRefs: []metav1.OwnerReference{}},
		{name: "no controller, adopting: taken over", existing: stored(drifted), kind: adopting, wantOp: Updated,
			writes: []string{"update"}, reports: []string{"updated child err=false"}, wantData: want, wantRefs: []metav1.OwnerReference{ownerRef}},
		{name: "any controller: synced whoever holds it", existing: stored(drifted, otherRef),
			kind: func(k *Owned[*corev1.ConfigMap]) { k.AnyController = true }, wantOp: Updated, writes: []string{"update"},
			reports: []string{"updated child err=false"}, wantData: want, wantRefs: []metav1.OwnerReference{otherRef}},
		{name: "no Sync: an existing child is never changed", existing: stored(drifted, ownerRef),
			kind: func(k *Owned[*corev1.ConfigMap]) { k.Sync = nil }, wantOp: Unchanged, wantData: drifted},
		{name: "update conflicts: the error, reported", existing: stored(drifted, ownerRef), fail: map[string]error{"update": conflict},
			wantOp: Updated, wantErr: true, writes: []string{"update"}, reports: []string{"updated child err=true"}, wantData: drifted},
		{name: "immutable field: deleted, created by a later reconcile", existing: stored(map[string]string{"k": "v", "immutable": "0"}, ownerRef),
			wantOp: Deleted, writes: []string{"delete"}, reports: []string{"deleted child err=false"}},
		{name: "immutable field, RecreateNow: deleted and created", existing: stored(map[string]string{"k": "v", "immutable": "0"}, ownerRef),
			kind: func(k *Owned[*corev1.ConfigMap]) { k.RecreateNow = true }, wantOp: Created, writes: []string{"delete", "create"},
			reports: []string{"deleted child err=false", "created child err=false"}, wantData: want},
		{name: "create fails: the error, reported", fail: map[string]error{"create": apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "child", fmt.Errorf("quota"))},
			wantOp: Created, wantErr: true, writes: []string{"create"}, reports: []string{"created child err=true"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			k := configMaps()
			if tc.kind != nil {
				tc.kind(k)
			}
			var existing *corev1.ConfigMap
			if tc.existing != nil {
				existing = tc.existing.DeepCopy()
			}
			e := newOwnedEnv(t, existing, tc.fail)
			_, op, err := EnsureOwned(ctx, e.w, k, desiredConfig(want), e.report)
			if op != tc.wantOp || (err != nil) != tc.wantErr {
				t.Fatalf("op %s, err %v; want %s, error %v", opName[op], err, opName[tc.wantOp], tc.wantErr)
			}
			if diff := cmp.Diff(tc.writes, e.writes); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.reports, e.reports); diff != "" {
				t.Errorf("reports (-want +got):\n%s", diff)
			}
			if tc.wantData == nil {
				return
			}
			got := e.get(t)
			if diff := cmp.Diff(tc.wantData, got.Data); diff != "" {
				t.Errorf("stored data (-want +got):\n%s", diff)
			}
			if tc.wantRefs != nil {
				if diff := cmp.Diff(tc.wantRefs, got.OwnerReferences, cmpEmpty); diff != "" {
					t.Errorf("owner references (-want +got):\n%s", diff)
				}
			}
			if tc.existing != nil && !slices.Contains(e.writes, "delete") && got.Annotations["user"] != "note" {
				t.Errorf("a field the owner does not write was lost: annotations %v", got.Annotations)
			}
		})
	}
}

var cmpEmpty = cmp.Transformer("empty", func(refs []metav1.OwnerReference) []metav1.OwnerReference {
	if len(refs) == 0 {
		return nil
	}
	return refs
})

// adopting takes over a child without a controller, as the GCS claim of a cluster of the same name is.
func adopting(k *Owned[*corev1.ConfigMap]) {
	sync := k.Sync
	k.Adopt = true
	k.Sync = func(existing, desired *corev1.ConfigMap) (*corev1.ConfigMap, bool, bool) {
		u, changed, recreate := sync(existing, desired)
		if metav1.GetControllerOfNoCopy(existing) != nil {
			return u, changed, recreate
		}
		if !changed {
			u = existing.DeepCopy()
		}
		u.OwnerReferences = append(u.OwnerReferences, ownerRef)
		return u, true, false
	}
}

// A patch leaves alone what someone else wrote between the read and the write; an update guarded by the
// resourceVersion read fails instead of overwriting it.
func TestEnsureOwnedKeepsOthersWrites(t *testing.T) {
	ctx := context.Background()
	e := newOwnedEnv(t, stored(map[string]string{"k": "edited", "immutable": "1"}, ownerRef), nil)
	cached := e.get(t)
	// Someone annotates the child after the cache showed it.
	live := cached.DeepCopy()
	live.Annotations["theirs"] = "x"
	if err := e.cl.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	e.writes = nil
	k := configMaps()
	k.Patch = true
	e.w.Reader = staticReader{cached}
	if _, op, err := EnsureOwned(ctx, e.w, k, desiredConfig(map[string]string{"k": "v", "immutable": "1"}), nil); err != nil || op != Updated {
		t.Fatalf("patch: op %s, err %v", opName[op], err)
	}
	if got := e.get(t); got.Annotations["theirs"] != "x" || got.Data["k"] != "v" {
		t.Errorf("after the patch: annotations %v, data %v; want theirs kept and k=v", got.Annotations, got.Data)
	}

	k.Patch = false
	cached = e.get(t)
	live = cached.DeepCopy()
	live.Annotations["again"] = "y"
	if err := e.cl.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	e.w.Reader = staticReader{cached}
	_, _, err := EnsureOwned(ctx, e.w, k, desiredConfig(map[string]string{"k": "w", "immutable": "1"}), nil)
	if !apierrors.IsConflict(err) {
		t.Fatalf("update from a stale read: %v, want a conflict", err)
	}
	if got := e.get(t); got.Annotations["again"] != "y" {
		t.Errorf("the stale update overwrote a newer write: annotations %v", got.Annotations)
	}
}

// A create answered AlreadyExists: the object is not in the cache the child was looked up in.
func TestEnsureOwnedNameTaken(t *testing.T) {
	want := map[string]string{"k": "v", "immutable": "1"}
	tests := []struct {
		name     string
		policy   ExistsPolicy
		live     *corev1.ConfigMap
		wantOp   Op
		wantErr  bool
		writes   []string
		reports  []string
		wantData map[string]string
	}{
		{"pending: taken for the owner's own", ExistsPending, stored(want, otherRef), Exists, false,
			[]string{"create"}, []string{"exists child err=false"}, nil},
		{"fail: a failed create", ExistsFail, stored(want, ownerRef), Created, true,
			[]string{"create"}, []string{"created child err=true"}, nil},
		{"check: someone else's", ExistsCheck, stored(want, otherRef), Taken, false,
			[]string{"create"}, []string{"taken child err=false"}, nil},
		{"check: the owner's, drifted, left to the next reconcile", ExistsCheck, stored(map[string]string{"k": "x", "immutable": "1"}, ownerRef), Exists, false,
			[]string{"create"}, []string{"exists child err=false"}, map[string]string{"k": "x", "immutable": "1"}},
		{"sync: someone else's", ExistsSync, stored(want, otherRef), Taken, false,
			[]string{"create"}, []string{"taken child err=false"}, nil},
		{"sync: the owner's, as desired", ExistsSync, stored(want, ownerRef), Unchanged, false,
			[]string{"create"}, nil, want},
		{"sync: the owner's, drifted", ExistsSync, stored(map[string]string{"k": "x", "immutable": "1"}, ownerRef), Updated, false,
			[]string{"create", "update"}, []string{"updated child err=false"}, want},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newOwnedEnv(t, tc.live, nil)
			e.w.Reader = staticReader{} // the cache does not hold it
			k := configMaps()
			k.OnExists = tc.policy
			_, op, err := EnsureOwned(context.Background(), e.w, k, desiredConfig(want), e.report)
			if op != tc.wantOp || (err != nil) != tc.wantErr {
				t.Fatalf("op %s, err %v; want %s, error %v", opName[op], err, opName[tc.wantOp], tc.wantErr)
			}
			if tc.wantErr && !apierrors.IsAlreadyExists(err) {
				t.Errorf("error %v does not carry AlreadyExists", err)
			}
			if diff := cmp.Diff(tc.writes, e.writes); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.reports, e.reports); diff != "" {
				t.Errorf("reports (-want +got):\n%s", diff)
			}
			if tc.wantData != nil {
				if diff := cmp.Diff(tc.wantData, e.get(t).Data); diff != "" {
					t.Errorf("stored data (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// A child going away is neither written nor created again until it is gone.
func TestPlanOwnedWaitsForATerminatingChild(t *testing.T) {
	existing := stored(map[string]string{"k": "edited", "immutable": "0"}, ownerRef)
	existing.DeletionTimestamp = ptr.To(metav1.Now())
	if s := PlanOwned(owner, configMaps(), desiredConfig(map[string]string{"k": "v", "immutable": "1"}), existing); s.Op != Unchanged || s.Object != existing {
		t.Errorf("terminating child: %s, want unchanged with the existing object", opName[s.Op])
	}
	if s := PlanOwned(owner, configMaps(), desiredConfig(nil), (*corev1.ConfigMap)(nil)); s.Op != Created {
		t.Errorf("typed nil existing: %s, want created", opName[s.Op])
	}
}

// staticReader answers reads from the objects it holds (none: NotFound), as a cache that lags would.
type staticReader struct{ obj *corev1.ConfigMap }

func (r staticReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if r.obj == nil || client.ObjectKeyFromObject(r.obj) != key {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
	}
	r.obj.DeepCopyInto(obj.(*corev1.ConfigMap))
	return nil
}

func (staticReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return fmt.Errorf("not listed")
}

// configMapCreator creates ConfigMaps, counting them and marking each, and handles no other kind.
type configMapCreator struct{ created []string }

func (c *configMapCreator) Handles(obj client.Object) bool {
	_, ok := obj.(*corev1.ConfigMap)
	return ok
}

func (c *configMapCreator) Create(_ context.Context, obj client.Object) error {
	c.created = append(c.created, obj.GetName())
	obj.SetUID("from-creator")
	return nil
}

func TestWithCreator(t *testing.T) {
	ctx := context.Background()
	base := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	if WithCreator(base, nil) != base {
		t.Fatal("WithCreator(c, nil) is not c")
	}
	cr := &configMapCreator{}
	c := WithCreator(base, cr)
	// Handled: the creator's, and nothing reaches the client.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	if err := c.Create(ctx, cm); err != nil || cm.UID != "from-creator" {
		t.Fatalf("create a ConfigMap: %v, UID %q; want the creator's", err, cm.UID)
	}
	if err := base.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the client has the creator's ConfigMap: %v", err)
	}
	// With options (a dry run) or of another kind: the client's, and the creator is not asked.
	dry := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	if err := c.Create(ctx, dry, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(ctx, client.ObjectKeyFromObject(svc), &corev1.Service{}); err != nil {
		t.Fatalf("the Service is not the client's: %v", err)
	}
	if !slices.Equal(cr.created, []string{"a"}) {
		t.Fatalf("the creator created %v, want only [a]", cr.created)
	}
	// Everything but Create is the client's.
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &corev1.Service{}); err != nil {
		t.Fatal(err)
	}
}

// configMapDeleter is a configMapCreator that deletes ConfigMaps too, keeping the options it was given.
type configMapDeleter struct {
	configMapCreator
	deleted []string
	opts    []*metav1.DeleteOptions
}

func (d *configMapDeleter) Delete(_ context.Context, obj client.Object, opts *metav1.DeleteOptions) error {
	d.deleted = append(d.deleted, obj.GetName())
	d.opts = append(d.opts, opts)
	return nil
}

// A creator that is a Deleter deletes the objects of its kinds, given the delete's options as DeleteOptions; other
// kinds' deletes are the client's. A creator that is not one deletes nothing (TestWithCreator's: the client does).
func TestWithCreatorDeletes(t *testing.T) {
	ctx := context.Background()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}}
	base := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(svc.DeepCopy(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain"}}).Build()
	d := &configMapDeleter{}
	c := WithCreator(base, d)
	uid := types.UID("u1")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: uid}}
	if err := c.Delete(ctx, cm, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	want := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	if !slices.Equal(d.deleted, []string{"a"}) || !equality.Semantic.DeepEqual(d.opts[0], want) {
		t.Fatalf("the deleter deleted %v with %+v, want [a] with %+v", d.deleted, d.opts, want)
	}
	if err := c.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(ctx, client.ObjectKeyFromObject(svc), &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Service is still in the client: %v", err)
	}
	plain := WithCreator(base, &configMapCreator{})
	if err := plain.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain"}}); err != nil {
		t.Fatal(err)
	}
	if len(d.deleted) != 1 {
		t.Fatalf("the deleter deleted %v", d.deleted)
	}
}
