// Command cert-manager-controller runs cert-manager's certificate controllers as a plain
// process for hyperplug's test world.
//
// Upstream's controller main lives in a nested Go module (cmd/controller) that is not
// published to the module proxy, so scripts/build-tools.sh builds this small main instead.
// It uses only the published root module: it builds a controller context factory from a
// kubeconfig, constructs the selected controllers from cert-manager's registry, starts the
// shared informers and runs until SIGINT/SIGTERM. It covers the SelfSigned and CA issuers
// (what clusterctl-style webhook certificates need); ACME, Vault, Venafi and the ingress /
// gateway shims are left out. No pod or kubelet is involved.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"

	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"

	// Controllers register themselves with controllerpkg on import.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificatesigningrequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificatesigningrequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	// Issuer implementations used by the issuers/clusterissuers controllers.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager-controller:", err)
		os.Exit(1)
	}
}

func run() error {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server to work against")
	namespace := flag.String("namespace", "", "only watch this namespace (default: all)")
	clusterNS := flag.String("cluster-resource-namespace", "cert-manager",
		"namespace holding the secrets that ClusterIssuers refer to")
	only := flag.String("controllers", "", "comma-separated controller names (default: all registered)")
	workers := flag.Int("workers", 5, "workers per controller")
	version := flag.Bool("version", false, "print the version and exit")
	flag.Parse()

	if *version {
		fmt.Println(util.AppVersion)
		return nil
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := logf.Log.WithName("controller")
	ctx = logf.NewContext(ctx, log)

	opts := controllerpkg.ContextOptions{
		Kubeconfig:         *kubeconfig,
		KubernetesAPIQPS:   50,
		KubernetesAPIBurst: 100,
		Namespace:          *namespace,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace: *clusterNS,
		},
		SchedulerOptions: controllerpkg.SchedulerOptions{MaxConcurrentChallenges: 60},
	}
	factory, err := controllerpkg.NewContextFactory(ctx, opts)
	if err != nil {
		return fmt.Errorf("building the controller context: %w", err)
	}

	known := controllerpkg.Known()
	var names []string
	if *only == "" {
		for name := range known {
			names = append(names, name)
		}
		sort.Strings(names)
	} else {
		names = strings.Split(*only, ",")
	}

	var running []controllerpkg.Interface
	for _, name := range names {
		ctor, ok := known[name]
		if !ok {
			return fmt.Errorf("unknown controller %q", name)
		}
		c, err := ctor(factory)
		if err != nil {
			return fmt.Errorf("constructing %s: %w", name, err)
		}
		running = append(running, c)
	}

	// The informers the controllers asked for are shared through the factory; start them
	// once every controller has registered its own.
	base, err := factory.Build()
	if err != nil {
		return err
	}
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.SharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	log.Info("controllers starting", "controllers", names, "version", util.AppVersion)

	var wg sync.WaitGroup
	errs := make(chan error, len(running))
	for i, c := range running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(*workers, ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", names[i], err)
			}
		}()
	}
	select {
	case <-ctx.Done():
	case err := <-errs:
		stop()
		wg.Wait()
		return err
	}
	wg.Wait()
	return nil
}
