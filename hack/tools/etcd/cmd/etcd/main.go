// Command etcd is the upstream etcd server (go.etcd.io/etcd/server/v3/etcdmain), built from the
// Go module proxy because no binaries can be downloaded on the machines this project is built on.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
