// Command oci-registry serves the OCI distribution registry for hyperplug's test world:
// the registry's own server and `serve CONFIG` command, with only the storage and auth a
// test's registry uses (a directory on disk, or memory, and htpasswd logins).
//
// Upstream's main also links the Azure, Google Cloud Storage and S3 drivers, the token
// auth and the pull-through proxy: their cloud SDKs were a fifth of the Go source
// scripts/build-tools.sh compiled for the test world, for a registry that only ever
// stores in a temporary directory.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"

	// Storage drivers and access controllers register themselves on import.
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
