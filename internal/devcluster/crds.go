package devcluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// installCRDFiles creates (or updates) every CustomResourceDefinition in paths (YAML or JSON files, or directories
// of them, not recursed; other kinds are skipped) and waits until each is established, within timeout.
//
// It is not envtest's InstallCRDs because the manta binary links this package (`manta dev`), and envtest brings
// controller-runtime's test-process packages, whose init creates a directory under the user's cache or /tmp and
// panics when it cannot: Manta's image, with a read-only root file system, did not start.
func installCRDFiles(ctx context.Context, cfg *rest.Config, paths []string, timeout time.Duration) ([]string, error) {
	crds, err := readCRDs(paths)
	if err != nil {
		return nil, err
	}
	cs, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	names := make([]string, 0, len(crds))
	for _, crd := range crds {
		_, err := api.Create(ctx, crd, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var old *apiextensionsv1.CustomResourceDefinition
			if old, err = api.Get(ctx, crd.Name, metav1.GetOptions{}); err == nil {
				crd.ResourceVersion = old.ResourceVersion
				_, err = api.Update(ctx, crd, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return nil, fmt.Errorf("CRD %s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	err = poll(ctx, timeout, func() (bool, error) {
		for _, name := range names {
			crd, err := api.Get(ctx, name, metav1.GetOptions{})
			if err != nil || !established(crd) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("CRDs %s not established: %w", strings.Join(names, ", "), err)
	}
	return names, nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// readCRDs reads the CustomResourceDefinitions of paths, in order.
func readCRDs(paths []string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
				files = append(files, filepath.Join(p, e.Name()))
			}
		}
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if meta.Kind != "CustomResourceDefinition" {
				continue
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.Unmarshal(doc, crd); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			out = append(out, crd)
		}
	}
	return out, nil
}
