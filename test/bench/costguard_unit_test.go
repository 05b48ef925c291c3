package bench

import (
	"strings"
	"testing"
)

// TestCompareCosts holds the guard's promise: one more write per cluster fails it unless it is a status write, one
// more status write per pod fails it, while the spread the tolerances stand for passes.
func TestCompareCosts(t *testing.T) {
	base := map[string]float64{
		"cluster/create pods": 4, "cluster/update rayclusters.ray.io/status": 2.25, "cluster/writes": 11.25,
		"cluster/writes/other": 5, "cluster/events": 4, "job/update rayjobs.ray.io/status": 4, "job/writes": 24.5,
		"job/writes/other": 7, "pod/cachedBytes": 2472,
	}
	with := func(changes map[string]float64) map[string]float64 {
		got := map[string]float64{}
		for k, v := range base {
			got[k] = v
		}
		for k, v := range changes {
			got[k] = v
		}
		return got
	}
	for _, tc := range []struct {
		name string
		got  map[string]float64
		fail []string // the keys reported, in order
	}{
		{"same", with(nil), nil},
		{"fewer", with(map[string]float64{"cluster/create pods": 3, "cluster/writes": 10.25, "cluster/writes/other": 4}), nil},
		{"status writes within their spread", with(map[string]float64{"cluster/update rayclusters.ray.io/status": 3.65, "cluster/writes": 12.65,
			"job/update rayjobs.ray.io/status": 5, "job/writes": 25.5}), nil},
		{"one more Service patch per cluster", with(map[string]float64{"cluster/patch services": 1, "cluster/writes": 12.25, "cluster/writes/other": 6}),
			[]string{"cluster/patch services", "cluster/writes/other"}},
		{"one more status write per pod", with(map[string]float64{"cluster/update rayclusters.ray.io/status": 6.25, "cluster/writes": 15.25}),
			[]string{"cluster/update rayclusters.ray.io/status", "cluster/writes"}},
		{"one more event per cluster", with(map[string]float64{"cluster/events": 5, "cluster/writes": 12.25}),
			[]string{"cluster/events"}},
		{"one more event and one more Service patch per cluster", with(map[string]float64{"cluster/events": 5, "cluster/patch services": 1,
			"cluster/writes": 13.25, "cluster/writes/other": 6}),
			[]string{"cluster/events", "cluster/patch services", "cluster/writes", "cluster/writes/other"}},
		{"one more pod create per job", with(map[string]float64{"job/create pods": 1, "job/writes": 25.5, "job/writes/other": 8}),
			[]string{"job/create pods", "job/writes/other"}},
		{"a larger cached pod", with(map[string]float64{"pod/cachedBytes": 2600}), []string{"pod/cachedBytes"}},
		{"cached pod sizes differing in an IP's length", with(map[string]float64{"pod/cachedBytes": 2475}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs := compareCosts(base, tc.got)
			var keys []string
			for _, m := range msgs {
				key, _, _ := strings.Cut(m, " rose to ")
				keys = append(keys, key)
			}
			if strings.Join(keys, ",") != strings.Join(tc.fail, ",") {
				t.Errorf("reported %q, want %q:\n%s", keys, tc.fail, strings.Join(msgs, "\n"))
			}
		})
	}
}
