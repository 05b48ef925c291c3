// Package rbac_test checks the generated roles (config/rbac/*/role.yaml) against the code of the binary each one
// is for. The proxy roles are derived from the code: the HTTP methods of the internal/ray client methods a binary
// calls. The main roles are listed here, each (group, resource) with the Go symbol that uses it, so a role that
// grows a verb fails until someone names the code that needs it.
package rbac_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/manta-dev/manta/internal/testutil"
)

// A binary: its generated roles and the source trees its markers and calls come from.
type binary struct {
	role, proxyRole string
	dirs            []string
}

var binaries = map[string]binary{
	"operator":  {"config/rbac/operator/role.yaml", "config/rbac/operator-proxy/role.yaml", []string{"internal/controller", "internal/operator", "internal/clusterbuild"}},
	"apiserver": {"config/rbac/apiserver/role.yaml", "config/rbac/apiserver-proxy/role.yaml", []string{"internal/apiserver"}},
}

func readRole(t *testing.T, root, rel string) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatalf("%v (run make generate)", err)
	}
	var cr rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(bytes.TrimPrefix(data, []byte("---\n")), &cr); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return &cr
}

// grants flattens rules into "group/resource verb" strings.
func grants(rules []rbacv1.PolicyRule) map[string]bool {
	out := map[string]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out[g+"/"+res+" "+v] = true
				}
			}
		}
		for _, u := range r.NonResourceURLs {
			for _, v := range r.Verbs {
				out[u+" "+v] = true
			}
		}
	}
	return out
}

// parseDir parses the non-test Go files under dir (recursively).
func parseDir(t *testing.T, root, dir string) []*ast.File {
	t.Helper()
	var files []*ast.File
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// rayClientMethods reads internal/ray: for each exported method of the clients the proxy transport serves, the HTTP
// methods it sends (following calls to the same client's other methods).
func rayClientMethods(t *testing.T, root string) map[string]map[string]map[string]bool {
	t.Helper()
	http := map[string]map[string]map[string]bool{} // client type -> method -> HTTP methods
	calls := map[string]map[string][]string{}       // client type -> method -> same-receiver methods it calls
	for _, f := range parseDir(t, root, "internal/ray") {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 || fd.Body == nil {
				continue
			}
			star, ok := fd.Recv.List[0].Type.(*ast.StarExpr)
			if !ok {
				continue
			}
			typ := star.X.(*ast.Ident).Name
			if typ != "DashboardClient" && typ != "ServeProxyClient" {
				continue
			}
			recv := ""
			if len(fd.Recv.List[0].Names) == 1 {
				recv = fd.Recv.List[0].Names[0].Name
			}
			if http[typ] == nil {
				http[typ], calls[typ] = map[string]map[string]bool{}, map[string][]string{}
			}
			ms := map[string]bool{}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok {
					if x.Name == "http" && strings.HasPrefix(sel.Sel.Name, "Method") {
						ms[strings.ToUpper(strings.TrimPrefix(sel.Sel.Name, "Method"))] = true
					}
					if x.Name == recv && recv != "" {
						calls[typ][fd.Name.Name] = append(calls[typ][fd.Name.Name], sel.Sel.Name)
					}
				}
				return true
			})
			http[typ][fd.Name.Name] = ms
		}
	}
	for typ := range http { // the calls between methods are shallow: a fixed point in a few rounds
		for changed := true; changed; {
			changed = false
			for m, callees := range calls[typ] {
				for _, c := range callees {
					for hm := range http[typ][c] {
						if !http[typ][m][hm] {
							http[typ][m][hm], changed = true, true
						}
					}
				}
			}
		}
	}
	// Only what controllers and handlers reach through the interfaces ray.Dashboard and ray.ServeProxy: the
	// clients' other methods (ServeProxyClient.Get, for tests) share names with every Kubernetes client's.
	iface := map[string]string{"Dashboard": "DashboardClient", "ServeProxy": "ServeProxyClient"}
	for _, f := range parseDir(t, root, "internal/ray") {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || iface[ts.Name.Name] == "" {
				return true
			}
			keep := map[string]bool{}
			for _, m := range ts.Type.(*ast.InterfaceType).Methods.List {
				for _, id := range m.Names {
					keep[id.Name] = true
				}
			}
			maps.DeleteFunc(http[iface[ts.Name.Name]], func(m string, _ map[string]bool) bool { return !keep[m] })
			return false
		})
	}
	if len(http["DashboardClient"]) == 0 || len(http["ServeProxyClient"]) == 0 {
		t.Fatalf("found no methods of internal/ray's DashboardClient or ServeProxyClient: %v", http)
	}
	return http
}

// proxyResource is the subresource each client's requests go through with --use-kubernetes-proxy
// (internal/ray/factory.go: Dashboard uses ServiceProxyPath, ServeProxy PodProxyPath).
var proxyResource = map[string]string{"DashboardClient": "services/proxy", "ServeProxyClient": "pods/proxy"}

// httpVerb is how the API server authorises a proxied request: its HTTP method, lower-cased, with POST as create.
var httpVerb = map[string]string{"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}

// TestSecurityProxyRolesMatchTheCode: each binary's proxy role grants exactly the verbs of the requests it sends
// to Ray through the API server's proxy, and its main role grants no proxy verb at all.
func TestSecurityProxyRolesMatchTheCode(t *testing.T) {
	root := testutil.MustRepoRoot(t)
	clients := rayClientMethods(t, root)
	factory, err := os.ReadFile(filepath.Join(root, "internal", "ray", "factory.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?s)func \(f \*Factory\) Dashboard\(.*?ServiceProxyPath.*?func \(f \*Factory\) ServeProxy\(.*?PodProxyPath`).Match(factory) {
		t.Fatal("internal/ray/factory.go no longer sends the dashboard through services/proxy and the Serve proxy through pods/proxy: update proxyResource")
	}
	for name, b := range binaries {
		t.Run(name, func(t *testing.T) {
			want := map[string]bool{}
			for _, dir := range b.dirs {
				for _, f := range parseDir(t, root, dir) {
					ast.Inspect(f, func(n ast.Node) bool {
						call, ok := n.(*ast.CallExpr)
						if !ok {
							return true
						}
						sel, ok := call.Fun.(*ast.SelectorExpr)
						if !ok {
							return true
						}
						for typ, methods := range clients {
							for hm := range methods[sel.Sel.Name] {
								want[`/`+proxyResource[typ]+" "+httpVerb[hm]] = true
							}
						}
						return true
					})
				}
			}
			got := grants(readRole(t, root, b.proxyRole).Rules)
			for g := range got {
				if !want[g] {
					t.Errorf("%s grants %q, which no request of the %s's Ray clients needs", b.proxyRole, g, name)
				}
			}
			for w := range want {
				if !got[w] {
					t.Errorf("the %s sends requests that need %q, which %s does not grant", name, w, b.proxyRole)
				}
			}
			for g := range grants(readRole(t, root, b.role).Rules) {
				if strings.Contains(g, "/proxy ") {
					t.Errorf("%s grants %q: proxy verbs belong in %s, bound only with --use-kubernetes-proxy", b.role, g, b.proxyRole)
				}
			}
		})
	}
}

// used lists, for each (group/resource) a main role grants, its verbs and a pattern of the code in the binary's
// dirs that needs them. A verb not listed fails the test: add it here with the code that uses it, or drop the
// marker.
type used struct {
	verbs    string
	evidence string
}

var mainRoles = map[string]map[string]used{
	"operator": {
		"/nodes":                             {"get list watch", `&corev1\.Node\{`},                                                                     // ImagePullJob: which nodes to pull on
		"/podtemplates":                      {"get list watch", `&corev1\.PodTemplate\{`},                                                              // --default-pod-template
		"/pods":                              {"create delete get list patch update watch", `corev1\.Pod\b`},                                            // Ray and puller pods; autoscaler Role grants patch
		"/pods/resize":                       {"patch", `"pods/resize"`},                                                                                // granted in the autoscaler Role, so held
		"/serviceaccounts":                   {"create get list watch", `&corev1\.ServiceAccount\{`},                                                    // autoscaler ServiceAccount
		"/persistentvolumeclaims":            {"create get list patch watch", `corev1\.PersistentVolumeClaim\b`},                                        // the embedded GCS backend's claim, owner set by its deletion policy (gcsstorage.go)
		"/secrets":                           {"create get update", `builder\.AuthSecret\(|rayauth\.Dashboard\(|sec := &corev1\.Secret\{`},              // the Ray auth token Secret by name, uncached (never list or watch); tlsOptions: issued Secrets owned by their Certificate (tls.go)
		"/services":                          {"create delete get list patch update watch", `corev1\.Service\b`},                                        // head and serve Services
		"/events":                            {"create get list patch watch", `record\.EventRecorder|events\.EventRecorder|Eventf\(|corev1\.EventList`}, // and the kubelet's Pulled events, cached (startphases)
		"events.k8s.io/events":               {"create patch", `record\.EventRecorder|events\.EventRecorder|Eventf\(`},
		"authentication.k8s.io/tokenreviews": {"create", `TokenReviews\(\)\.Create`}, // metrics authentication
		"authorization.k8s.io/subjectaccessreviews": {"create", `SubjectAccessReviews\(\)\.Create`}, // metrics authorisation
		"batch/jobs":                             {"create delete get list watch", `batchv1\.Job\b`},                       // RayJob submitters, Redis cleanup
		"cert-manager.io/issuers":                {"create get list watch", `&cmv1\.Issuer\{`},                             // tlsOptions (tls.go)
		"cert-manager.io/certificates":           {"create get list update watch", `&cmv1\.Certificate\{`},                 // tlsOptions, SANs follow the pods (tls.go)
		"networking.k8s.io/ingresses":            {"create delete get list update watch", `networkingv1\.Ingress\b`},       // headGroupSpec.enableIngress (ingress.go)
		"networking.k8s.io/networkpolicies":      {"create delete get list update watch", `networkingv1\.NetworkPolicy\b`}, // spec.networkPolicy (networkpolicy.go)
		"scheduling.volcano.sh/podgroups":        {"create get list update watch", `volcanov1beta1\.PodGroup\b`},           // --batch-scheduler=volcano, gang kept in line (podgroup.go)
		"scheduling.x-k8s.io/podgroups":          {"create get list watch", `spv1alpha1\.PodGroup\b`},                      // --batch-scheduler=scheduler-plugins, made once (podgroup.go)
		"gateway.networking.k8s.io/gateways":     {"create delete get list update watch", `gwv1\.Gateway\b`},               // NewClusterWithIncrementalUpgrade (incremental.go, write.go)
		"gateway.networking.k8s.io/httproutes":   {"create delete get list update watch", `gwv1\.HTTPRoute\b`},             // traffic weights moved by the upgrade
		"manta.dev/imagepulljobs":                {"create delete get list patch update watch", `ImagePullJob\b`},
		"manta.dev/imagepulljobs/status":         {"get patch update", `StatusWriter\.UpdateStatus\(`},
		"ray.io/rayclusters":                     {"create delete get list patch update watch", `rayv1\.RayCluster\b`},
		"ray.io/rayclusters/status":              {"get patch update", `StatusWriter\.UpdateStatus\(`},
		"ray.io/rayclusters/finalizers":          {"update", `Finalizer: +\w|Finalizers`},
		"ray.io/rayjobs":                         {"create delete get list patch update watch", `rayv1\.RayJob\b`}, // RayCronJob creates them
		"ray.io/raycronjobs":                     {"get list watch", `rayv1\.RayCronJob\b`},
		"ray.io/raycronjobs/status":              {"get patch update", `StatusWriter\.UpdateStatus\(`},
		"ray.io/raycronjobs/finalizers":          {"update", `NewControllerRef\(cj,`}, // blockOwnerDeletion on the RayJobs it owns
		"ray.io/rayjobs/status":                  {"get patch update", `StatusWriter\.UpdateStatus\(`},
		"ray.io/rayjobs/finalizers":              {"update", `Finalizer: +\w|Finalizers`},
		"ray.io/rayservices":                     {"get list patch update watch", `rayv1\.RayService\b`},
		"ray.io/rayservices/status":              {"get patch update", `StatusWriter\.UpdateStatus\(`},
		"ray.io/rayservices/finalizers":          {"update", `Finalizer: +\w|Finalizers`},
		"rbac.authorization.k8s.io/roles":        {"create delete get list update watch", `&rbacv1\.Role\{`},        // autoscaler Role, restored when edited (autoscalerrbac.go)
		"rbac.authorization.k8s.io/rolebindings": {"create delete get list update watch", `&rbacv1\.RoleBinding\{`}, // autoscaler RoleBinding, restored or removed (autoscalerrbac.go)
	},
	"apiserver": {
		"authentication.k8s.io/tokenreviews":        {"create", `TokenReview\{`},
		"authorization.k8s.io/subjectaccessreviews": {"create", `SubjectAccessReview\{`},
		"/configmaps":             {"create delete get list", `corev1\.ConfigMap\b`}, // compute templates
		"ray.io/rayclusters":      {"create delete get list update", `rayv1\.RayCluster\b`},
		"ray.io/rayjobs":          {"create delete get list update", `rayv1\.RayJob\b`},
		"ray.io/rayservices":      {"create delete get list update", `rayv1\.RayService\b`},
		"manta.dev/imagepulljobs": {"create delete get list", `ImagePullJob\b`},
		"/events":                 {"list", `"/api/v1/namespaces/\{namespace\}/events"`}, // the v2 events path under --auth none
		"events.k8s.io/events":    {"list", `eventsv1\.EventList`},                       // events in v1 answers; v1.7's v2 path under --auth none
		"/services":               {"get", `corev1\.Service\b`},                          // the head Service's dashboard port
		"/secrets":                {"get", `rayauth\.Token\(`},                           // a RayCluster's Ray auth token, by name: never list or watch
		"/namespaces":             {"list", `corev1\.NamespaceList\b`},                   // the console's namespace switcher, narrowed by SubjectAccessReview
	},
}

// TestSecurityMainRolesGrantOnlyListedVerbs: every verb of the operator's and the API server's roles is listed in
// mainRoles with the code that needs it, and that code exists.
func TestSecurityMainRolesGrantOnlyListedVerbs(t *testing.T) {
	root := testutil.MustRepoRoot(t)
	for name, b := range binaries {
		t.Run(name, func(t *testing.T) {
			var src bytes.Buffer
			for _, dir := range b.dirs {
				err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
					if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
						return err
					}
					data, err := os.ReadFile(p)
					src.Write(data)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			listed := map[string]bool{}
			for res, u := range mainRoles[name] {
				for _, v := range strings.Fields(u.verbs) {
					listed[res+" "+v] = true
				}
				if !regexp.MustCompile(u.evidence).Match(src.Bytes()) {
					t.Errorf("%s: no code in %v matches %q, the use listed for %s", name, b.dirs, u.evidence, res)
				}
			}
			got := grants(readRole(t, root, b.role).Rules)
			for _, g := range slices.Sorted(maps.Keys(got)) {
				if !listed[g] {
					t.Errorf("%s grants %q, which the code does not use (or mainRoles does not list: add it with the code that needs it)", b.role, g)
				}
			}
			for _, l := range slices.Sorted(maps.Keys(listed)) {
				if !got[l] {
					t.Errorf("mainRoles lists %q for the %s, which %s does not grant", l, name, b.role)
				}
			}
		})
	}
}
