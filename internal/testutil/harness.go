package testutil

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// TestLogEnv is the environment variable that, set, makes UseTestLogger log the controllers' development output
// at V(2).
const TestLogEnv = "MANTA_TEST_LOG"

// UseTestLogger sets controller-runtime's logger for a test binary: none, or with TestLogEnv set, a development
// logger down to V(2). Call it from TestMain.
func UseTestLogger() {
	if os.Getenv(TestLogEnv) != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.Level(-2))))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
}

// NewManager is a controller-runtime manager on cfg for a test: Manta's scheme, no metrics or health listener,
// and no check that controller names are unique (a test binary starts the same controllers more than once).
// adjust changes the options before the manager is made.
func NewManager(t testing.TB, cfg *rest.Config, adjust ...func(*ctrl.Options)) ctrl.Manager {
	t.Helper()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	opts := ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	for _, f := range adjust {
		f(&opts)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

// CacheOnlyLabelled is an option of NewManager: the manager's cache holds only the objects of obj's kind that carry
// the label key (any value), as the operator's cache does for the kinds it makes (Ray's pods carry ray.io/node-type).
// It panics when key is not a valid label key.
func CacheOnlyLabelled(obj client.Object, key string) func(*ctrl.Options) {
	sel, err := labels.Parse(key)
	if err != nil {
		panic(fmt.Sprintf("CacheOnlyLabelled(%T, %q): %v", obj, key, err))
	}
	return func(o *ctrl.Options) {
		if o.Cache.ByObject == nil {
			o.Cache.ByObject = map[client.Object]cache.ByObject{}
		}
		o.Cache.ByObject[obj] = cache.ByObject{Label: sel}
	}
}

// Update reads the object named as obj is, applies mutate to it and writes it back, reading and applying again
// when the write conflicts (the controller wrote the object meanwhile), for up to the Env's wait; any other error
// fails the test. It returns the object as written.
func Update[T client.Object](t testing.TB, e *Env, obj T, mutate func(T)) T {
	t.Helper()
	return update(t, e, obj, mutate, "update", func(ctx context.Context, o T) error { return e.Client.Update(ctx, o) })
}

// UpdateStatus is Update of the object's status subresource, as the controller that owns the status (or a kubelet)
// would write it.
func UpdateStatus[T client.Object](t testing.TB, e *Env, obj T, mutate func(T)) T {
	t.Helper()
	return update(t, e, obj, mutate, "update the status of", func(ctx context.Context, o T) error { return e.Client.Status().Update(ctx, o) })
}

func update[T client.Object](t testing.TB, e *Env, obj T, mutate func(T), verb string, write func(context.Context, T) error) T {
	t.Helper()
	var cur T
	e.Eventually(t, fmt.Sprintf("%s %T %s/%s without a conflict", verb, obj, obj.GetNamespace(), obj.GetName()), func() (bool, string) {
		cur = Get(t, e, obj)
		mutate(cur)
		err := write(context.Background(), cur)
		if err != nil && !apierrors.IsConflict(err) {
			t.Fatalf("%s %T %s/%s: %v", verb, obj, obj.GetNamespace(), obj.GetName(), err)
		}
		return err == nil, fmt.Sprint(err)
	})
	return cur
}
