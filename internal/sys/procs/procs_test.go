package procs

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manta-dev/manta/internal/testutil"
)

// fake records the settings an Adapter makes.
type fake struct {
	mu  sync.Mutex
	set []string
}

func (f *fake) adapter() *Adapter {
	return &Adapter{
		SetOne:     func() { f.mu.Lock(); f.set = append(f.set, "one"); f.mu.Unlock() },
		SetDefault: func() { f.mu.Lock(); f.set = append(f.set, "default"); f.mu.Unlock() },
	}
}

func (f *fake) settings() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.set...)
}

func TestObserve(t *testing.T) {
	f := &fake{}
	a := f.adapter()
	a.Start()
	steps := []struct {
		cores float64
		one   bool
	}{
		{0.1, true}, {0.69, true}, // under RaiseAt: one P
		{0.7, false}, // nearly a core at one P: the default
		{0.5, false}, // between the thresholds: stays
		{0.2, false}, {0.2, false}, {0.2, false}, {0.2, false}, {0.2, false}, {0.2, false}, {0.2, false}, {0.2, false}, {0.2, false},
		{0.31, false}, // a busy interval starts the quiet spell again
		{0.1, false}, {0.1, false}, {0.1, false}, {0.1, false}, {0.1, false}, {0.1, false}, {0.1, false}, {0.1, false}, {0.1, false},
		{0.1, true}, // the tenth quiet interval in a row: one P
		{0.1, true},
		{1.5, false},
	}
	for i, s := range steps {
		if got := a.Observe(s.cores); got != s.one {
			t.Fatalf("step %d (%.2f cores): one P = %v, want %v", i, s.cores, got, s.one)
		}
	}
	want := []string{"one", "default", "one", "default"}
	if got := f.settings(); !slices.Equal(got, want) {
		t.Fatalf("settings %v, want %v", got, want)
	}
}

// TestRun adapts the real runtime to real CPU use: one P at start, the default while goroutines spin, one P again
// once they stop, the default when Run ends.
func TestRun(t *testing.T) {
	prev := runtime.GOMAXPROCS(2) // as on a 2-core machine, whatever this one has
	defer runtime.GOMAXPROCS(prev)
	var defaults atomic.Int32
	a := &Adapter{
		Interval: 100 * time.Millisecond,
		// Low enough that a spinning goroutine crosses it on a machine busy with other tests.
		RaiseAt:    0.3,
		LowerBelow: 0.1,
		LowerAfter: 3,
		SetDefault: func() { defaults.Add(1); runtime.GOMAXPROCS(2) },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	testutil.Eventually(t, 10*time.Second, "one P at start", func() (bool, string) {
		return runtime.GOMAXPROCS(0) == 1, ""
	})

	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for x := 0; !stop.Load(); x++ {
				_ = x * x
			}
		})
	}
	testutil.Eventually(t, 60*time.Second, "the default while busy", func() (bool, string) {
		return runtime.GOMAXPROCS(0) == 2, ""
	})
	stop.Store(true)
	wg.Wait()
	testutil.Eventually(t, 60*time.Second, "one P once quiet", func() (bool, string) {
		return runtime.GOMAXPROCS(0) == 1, ""
	})
	cancel()
	<-done
	if runtime.GOMAXPROCS(0) != 2 || defaults.Load() != 2 {
		t.Fatalf("after Run: %d Ps, %d returns to the default; want 2 and 2", runtime.GOMAXPROCS(0), defaults.Load())
	}
}
