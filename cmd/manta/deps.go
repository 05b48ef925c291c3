package main

import (
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/spf13/cobra"
	_ "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	_ "sigs.k8s.io/controller-runtime"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "sigs.k8s.io/yaml"
)

func main() {}
