// etcd for the control-plane test tier: upstream etcdmain, pinned by this module's go.mod.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
