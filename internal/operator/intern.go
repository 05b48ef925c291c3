package operator

import (
	"reflect"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// Every cached object is decoded afresh from its own bytes, so each holds its own copy of every string: 1,000
// RayClusters of one shape hold 1,000 copies of the same label keys, container names, images, resource names,
// condition types and reasons. The caches' transforms replace each such string with the one copy an intern table
// holds (internStrings), so identical objects share them.

// internMax and internListMax bound the intern table's strings and shared ResourceLists. An entry stays in it
// after the objects that held it are gone, so once either is full it starts afresh: what is already shared stays
// shared, and new objects share new copies. So at most about 0.5 MB of strings and 0.4 MB of lists are kept for
// objects gone. (500 of the bench's clusters, their pods and Services intern about 2,100 strings and 2 lists: a
// fleet has as many lists as its templates have distinct resources.)
const (
	internMax     = 1 << 13
	internListMax = 1 << 9
)

// interned is the caches' intern table.
var interned = newInternTable(internMax, internListMax)

type internTable struct {
	mu  sync.Mutex
	m   map[string]string
	max int
	// lists are the shared ResourceLists (see shareResourceList), by their content; at most maxLists.
	lists    map[string]corev1.ResourceList
	maxLists int
}

func newInternTable(maxStrings, maxLists int) *internTable {
	return &internTable{m: map[string]string{}, max: maxStrings, lists: map[string]corev1.ResourceList{}, maxLists: maxLists}
}

// str returns the table's copy of s, adding one (cloned, so it holds no larger buffer s may point into) if there
// is none.
func (t *internTable) str(s string) string {
	if s == "" {
		return s
	}
	if c, ok := t.m[s]; ok {
		return c
	}
	if len(t.m) >= t.max {
		clear(t.m)
	}
	c := strings.Clone(s)
	t.m[c] = c
	return c
}

// internSkip names the string fields that are (nearly) unique to an object: interning them would only fill the
// table.
var internSkip = map[reflect.Type]map[string]bool{
	reflect.TypeFor[metav1.ObjectMeta]():      {"Name": true, "GenerateName": true, "UID": true, "ResourceVersion": true, "SelfLink": true},
	reflect.TypeFor[metav1.OwnerReference]():  {"UID": true},
	reflect.TypeFor[corev1.PodStatus]():       {"PodIP": true},
	reflect.TypeFor[corev1.PodIP]():           {"IP": true},
	reflect.TypeFor[corev1.ContainerStatus](): {"ContainerID": true, "ImageID": true},
	reflect.TypeFor[corev1.ObjectReference](): {"Name": true, "UID": true, "ResourceVersion": true},
	reflect.TypeFor[corev1.Event]():           {"Message": true},
	reflect.TypeFor[corev1.ServiceSpec]():     {"ClusterIP": true, "ClusterIPs": true},
	reflect.TypeFor[rayv1.HeadInfo]():         {"PodIP": true, "ServiceIP": true, "PodName": true},
}

// internHolds and internFields cache, per type, whether it holds a string internStrings sets at all (a type that
// does not is not walked) and, of a struct, the fields that do. Both are guarded by interned.mu.
var (
	internHolds  = map[reflect.Type]bool{}
	internFields = map[reflect.Type][]int{}
)

// holdsStrings says whether a value of type t holds a string internStrings would set: one in an exported field,
// an element or a map key or value, however deep.
func holdsStrings(t reflect.Type) bool {
	if r, ok := internHolds[t]; ok {
		return r
	}
	// A recursive type is taken to hold strings while it is being worked out.
	internHolds[t] = true
	r := false
	switch t.Kind() {
	case reflect.String:
		r = true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		r = holdsStrings(t.Elem())
	case reflect.Map:
		r = holdsStrings(t.Key()) || holdsStrings(t.Elem())
	case reflect.Struct:
		r = len(structFields(t)) > 0
	}
	internHolds[t] = r
	return r
}

// structFields are the fields of the struct type t that internStrings walks.
func structFields(t reflect.Type) []int {
	if fs, ok := internFields[t]; ok {
		return fs
	}
	fs := []int{}
	internFields[t] = fs
	for i := range t.NumField() {
		f := t.Field(i)
		if f.IsExported() && !internSkip[t][f.Name] && holdsStrings(f.Type) {
			fs = append(fs, i)
		}
	}
	internFields[t] = fs
	return fs
}

// internStrings replaces every string obj holds (but those internSkip names) with the intern table's copy. It
// changes no value: each string is replaced by an equal one. A RayCluster's ResourceLists (its templates'
// requests and limits, nearly a third of a small cached cluster) are shared too: see shareResourceList.
func internStrings(obj any) { internStringsBut(obj, "") }

// internStringsBut is internStrings but for obj's top-level field named skip ("" for none).
func internStringsBut(obj any, skip string) {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return
	}
	_, shareLists := obj.(*rayv1.RayCluster)
	interned.mu.Lock()
	defer interned.mu.Unlock()
	e := v.Elem()
	if skip == "" || e.Kind() != reflect.Struct {
		internValue(interned, e, shareLists)
		return
	}
	if !holdsStrings(e.Type()) {
		return
	}
	for _, i := range structFields(e.Type()) {
		if e.Type().Field(i).Name != skip {
			internValue(interned, e.Field(i), shareLists)
		}
	}
}

var resourceListType = reflect.TypeFor[corev1.ResourceList]()

// internValue interns the strings of v, which is settable; shareLists shares its ResourceLists.
func internValue(t *internTable, v reflect.Value, shareLists bool) {
	switch v.Kind() {
	case reflect.String:
		if s := v.String(); s != "" {
			v.SetString(t.str(s))
		}
	case reflect.Pointer:
		if !v.IsNil() && holdsStrings(v.Type().Elem()) {
			internValue(t, v.Elem(), shareLists)
		}
	case reflect.Slice, reflect.Array:
		if !holdsStrings(v.Type().Elem()) {
			return
		}
		for i := range v.Len() {
			internValue(t, v.Index(i), shareLists)
		}
	case reflect.Struct:
		if !holdsStrings(v.Type()) { // first, so that a recursive type is worked out as one
			return
		}
		for _, i := range structFields(v.Type()) {
			internValue(t, v.Field(i), shareLists)
		}
	case reflect.Map:
		if shareLists && v.Type() == resourceListType && v.Len() > 0 {
			v.Set(reflect.ValueOf(t.shareResourceList(v.Interface().(corev1.ResourceList))))
			return
		}
		if m, ok := v.Interface().(map[string]string); ok { // labels, annotations, selectors: most maps interned
			internStringMap(t, m)
			return
		}
		internMap(t, v)
	}
}

// internStringMap is internMap for a map[string]string, without reflection: setting a present key stores the
// key given (and adds no entry, so the range sees each entry once).
func internStringMap(t *internTable, m map[string]string) {
	for k, v := range m {
		m[t.str(k)] = t.str(v)
	}
}

// internMap interns a map's keys and values. Assigning to a present key stores the key given too, so setting each
// entry anew with the interned key replaces the map's own copy of it.
func internMap(t *internTable, m reflect.Value) {
	kt, et := m.Type().Key(), m.Type().Elem()
	keys, elems := holdsStrings(kt), holdsStrings(et)
	if m.Len() == 0 || !keys && !elems {
		return
	}
	// A map's entries are not settable in place: each is copied out, interned and set back.
	k, e := reflect.New(kt).Elem(), reflect.New(et).Elem()
	for it := m.MapRange(); it.Next(); {
		k.SetIterKey(it)
		e.SetIterValue(it)
		if keys {
			internValue(t, k, false)
		}
		if elems {
			internValue(t, e, false)
		}
		m.SetMapIndex(k, e)
	}
}

// shareResourceList returns the table's ResourceList equal to l in every field of every quantity (its cached
// string and format too), adding l (its names interned) if there is none. A ResourceList of a cached RayCluster can
// be shared because nothing writes into one: the controllers read the cache's own clusters only in place (the pod
// event handlers, the start phases), and reconcile copies, whose ResourceLists DeepCopy makes anew. (Pods keep no
// ResourceList: podCacheDrops drops their resources.)
func (t *internTable) shareResourceList(l corev1.ResourceList) corev1.ResourceList {
	names := make([]string, 0, len(l))
	for n := range l {
		names = append(names, string(n))
	}
	slices.Sort(names)
	var key strings.Builder
	for _, n := range names {
		q := l[corev1.ResourceName(n)]
		key.WriteString(n)
		key.WriteByte(0)
		key.WriteString(q.String())
		key.WriteByte(0)
		key.WriteString(string(q.Format))
		key.WriteByte(0)
	}
	k := key.String()
	if s, ok := t.lists[k]; ok {
		if reflect.DeepEqual(s, l) {
			return s
		}
		return l // equal in value but not in form ("1" and "1000m"): kept as it came
	}
	if len(t.lists) >= t.maxLists {
		clear(t.lists)
	}
	internMap(t, reflect.ValueOf(l))
	t.lists[k] = l
	return l
}
