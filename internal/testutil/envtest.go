// Package testutil holds helpers shared by Manta's tests.
package testutil

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	spv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/devcluster"
)

// ModulePath is the Go module path of the repository; RepoRoot looks for the go.mod that declares it.
const ModulePath = devcluster.ModulePath

// RepoRoot returns the root of the Manta repository (see devcluster.RepoRoot).
func RepoRoot() (string, error) { return devcluster.RepoRoot() }

// MustRepoRoot is RepoRoot for tests: it fails the test when the root cannot be found.
func MustRepoRoot(t testing.TB) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Scheme returns a scheme with the built-in Kubernetes types and all of Manta's API groups.
func Scheme() (*kruntime.Scheme, error) {
	s := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{
		clientgoscheme.AddToScheme,
		rayv1.AddToScheme,
		cmv1.AddToScheme,
		volcanov1beta1.AddToScheme,
		spv1alpha1.AddToScheme,
		gwv1.Install,
		mantav1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// EnvtestStartTimeout and EnvtestStopTimeout bound how long each envtest component (etcd, kube-apiserver) may
// take to start and to stop.
const (
	EnvtestStartTimeout = 3 * time.Minute
	EnvtestStopTimeout  = time.Minute
)

// UnitTestsEnv is set in the environment of the tests `make test-unit` runs (no package named envtest or
// integration), which must not start a control plane.
const UnitTestsEnv = "MANTA_UNIT_TESTS"

// StartEnvtest starts a kube-apiserver and etcd (envtest) with Manta's CRDs from config/crd installed, and returns
// its rest.Config and a client with Manta's scheme. The control plane is stopped when the test ends.
// The binaries come from $KUBEBUILDER_ASSETS, or <repo>/bin when that is unset.
func StartEnvtest(t testing.TB) (*rest.Config, client.Client) {
	t.Helper()
	return StartEnvtestWithCRDs(t, filepath.Join(MustRepoRoot(t), "config", "crd"))
}

// StartEnvtestWithCRDs is StartEnvtest with the CRDs read from crdDirs instead (the oracle test installs KubeRay's).
func StartEnvtestWithCRDs(t testing.TB, crdDirs ...string) (*rest.Config, client.Client) {
	t.Helper()
	return startEnvtest(t, nil, crdDirs...)
}

// auditPolicy records every request with its user, verb, object and response code (no bodies).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// StartEnvtestAudited is StartEnvtest with kube-apiserver's audit log on, at Metadata level, as JSON lines in the
// file it returns: a test can check who asked Kubernetes for what, and what Kubernetes answered.
func StartEnvtestAudited(t testing.TB) (*rest.Config, client.Client, string) {
	t.Helper()
	dir := t.TempDir()
	policy, log := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, c := startEnvtest(t, func(env *envtest.Environment) {
		args := env.ControlPlane.GetAPIServer().Configure()
		args.Set("audit-policy-file", policy)
		args.Set("audit-log-path", log)
		args.Set("audit-log-format", "json")
	}, filepath.Join(MustRepoRoot(t), "config", "crd"))
	return cfg, c, log
}

func startEnvtest(t testing.TB, configure func(*envtest.Environment), crdDirs ...string) (*rest.Config, client.Client) {
	t.Helper()
	if os.Getenv(UnitTestsEnv) != "" {
		// make test-unit runs the packages whose tests start no control plane (hack's TestUnitPackagesStartNothing
		// checks their imports and calls): this test reached StartEnvtest by a way that check does not see.
		// Failing says so; starting envtest would hide it.
		t.Fatalf("%s is set (make test-unit), but this test starts envtest: it belongs in its package's envtest package", UnitTestsEnv)
	}
	root := MustRepoRoot(t)
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	apiServer, etcd := diesWithTest(t, "kube-apiserver"), diesWithTest(t, "etcd")
	newEnv := func() *envtest.Environment {
		env := &envtest.Environment{
			CRDDirectoryPaths:     crdDirs,
			ErrorIfCRDPathMissing: true,
			Scheme:                scheme,
			// envtest's defaults (20s to start or stop each component, 10s for the CRDs to be served) are too
			// short on a small machine running other tests alongside.
			ControlPlaneStartTimeout: EnvtestStartTimeout,
			ControlPlaneStopTimeout:  EnvtestStopTimeout,
			CRDInstallOptions:        envtest.CRDInstallOptions{MaxTime: 2 * time.Minute},
		}
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			env.BinaryAssetsDirectory = filepath.Join(root, "bin")
		}
		env.ControlPlane.GetAPIServer().Path = apiServer
		env.ControlPlane.Etcd = &envtest.Etcd{Path: etcd}
		if configure != nil {
			configure(env)
		}
		return env
	}
	// envtest picks etcd's and kube-apiserver's ports from the kernel's ephemeral range and frees them before the
	// components bind them, so an outgoing connection elsewhere on the machine can take one first: start a fresh
	// environment, on new ports, up to twice more.
	var env *envtest.Environment
	var cfg *rest.Config
	for try := 1; ; try++ {
		env = newEnv()
		cfg, err = env.Start()
		if err == nil {
			break
		}
		// A failed start can leave etcd or kube-apiserver running.
		stopErr := env.Stop()
		if try == 3 || stopErr != nil {
			t.Fatalf("starting envtest (binaries from KUBEBUILDER_ASSETS or %s), %d tries: %v", filepath.Join(root, "bin"), try, errors.Join(err, stopErr))
		}
		t.Logf("starting envtest failed, starting it again: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	// envtest has waited for the CRDs to be served, so the client's REST mapper finds them.
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, cl
}

// diesWithTest writes, in the test's temporary directory, a script that runs the envtest binary name (from
// $TEST_ASSET_<NAME>, $KUBEBUILDER_ASSETS or <repo>/bin, where envtest looks) to be killed when the test process
// dies (setpriv --pdeathsig): a test binary killed at its timeout, or by a signal, runs no cleanup, and envtest's
// etcd and kube-apiserver would otherwise run on for good, holding their ports and CPU.
func diesWithTest(t testing.TB, name string) string {
	t.Helper()
	bin := os.Getenv("TEST_ASSET_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")))
	if bin == "" {
		dir := os.Getenv("KUBEBUILDER_ASSETS")
		if dir == "" {
			dir = filepath.Join(MustRepoRoot(t), "bin")
		}
		bin = filepath.Join(dir, name)
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), name)
	// The signal goes when the thread that started the component ends, which in a Go program is the process
	// ending: the runtime keeps its threads (internal/devcluster starts its components so too).
	body := "#!/bin/sh\nexec setpriv --pdeathsig KILL -- " + shellQuote(abs) + " \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Manager is what RunManager starts: a controller-runtime manager.
type Manager interface {
	Start(ctx context.Context) error
}

// RunManager starts mgr until the test ends, and fails the test if it returns an error then. The context returned
// ends when the test does.
func RunManager(t testing.TB, mgr Manager) context.Context {
	t.Helper()
	ctx, _ := startManager(t, mgr)
	return ctx
}

// StartManager starts mgr and returns a function that stops it and waits for it to return, failing the test if it
// returned an error; the test's end stops it too. For a test that stops its operator and starts another.
func StartManager(t testing.TB, mgr Manager) (stop func()) {
	t.Helper()
	_, stop = startManager(t, mgr)
	return stop
}

func startManager(t testing.TB, mgr Manager) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return ctx, stop
}
