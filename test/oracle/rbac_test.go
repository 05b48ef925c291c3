package oracle

import (
	"context"
	"fmt"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

type (
	rbacRoleList        = rbacv1.RoleList
	rbacRoleBindingList = rbacv1.RoleBindingList
)

// listInto adds every object of a list kind in ns to objs, keyed <kind>/<name>.
func listInto(t *testing.T, cl client.Client, ns string, l client.ObjectList, objs map[string]map[string]any, toMap func(any) map[string]any, names *strings.Replacer) {
	t.Helper()
	if err := cl.List(context.Background(), l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	items, err := meta.ExtractList(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		o := it.(client.Object)
		kind := fmt.Sprintf("%T", it)
		switch kind {
		case "*v1.ServiceAccount":
			kind = "serviceaccount"
			if o.GetName() == "default" {
				continue
			}
		case "*v1.Role":
			kind = "role"
		case "*v1.RoleBinding":
			kind = "rolebinding"
		}
		objs[kind+"/"+names.Replace(o.GetName())] = toMap(o)
	}
}
