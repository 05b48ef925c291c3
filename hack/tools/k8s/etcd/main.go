// Command etcd runs etcd's server from go.etcd.io/etcd/server/v3/etcdmain at the version pinned in go.mod.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
