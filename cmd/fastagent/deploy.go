package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/buildinfo"
	"github.com/fastagent/fastagent/internal/deploy"
	"github.com/fastagent/fastagent/internal/llm"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/workspace"
)

// deployFlags are `fastagent deploy`'s flags.
type deployFlags struct {
	out, temporal, name, image, namespace, address, taskQueue string
	agents                                                    []string
	force                                                     bool
}

func newDeploy(g *globals) *cobra.Command {
	f := &deployFlags{}
	cmd := &cobra.Command{
		Use:   "deploy compose|kubernetes|helm|fly|railway",
		Short: "Write a deployment of the agent folder: Dockerfile, the target's files and a RUNBOOK.md",
		Long: "Writes what it takes to run the agent folder (and the --agent folders served beside it) on a target:\n" +
			"  compose     Docker Compose on one machine: worker, ingress, PostgreSQL, NATS and (--temporal self) a Temporal server with its Web UI\n" +
			"  kubernetes  plain manifests: worker and ingress Deployments, Service, Ingress, NetworkPolicies, PodDisruptionBudgets, KEDA autoscaling\n" +
			"  helm        the same as a Helm chart with values\n" +
			"  fly         Fly.io: worker and ingress process groups, NATS as a private app\n" +
			"  railway     Railway: a config file per service\n" +
			"Worker and ingress are always separate services; secrets appear by name only; workers never scale to zero\n" +
			"(schedules and timers fire only while a worker polls). Each target gets a RUNBOOK.md: the secrets to set,\n" +
			"the first-time steps (fastagent doctor, search attributes, the Worker Deployment version), how to roll out,\n" +
			"scale and back up. Files that exist are never overwritten without --force.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || !slices.Contains(deploy.Targets, args[0]) {
				return usageError("deploy needs one target: %s (see fastagent deploy --help)", strings.Join(deploy.Targets, ", "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			target := args[0]
			spec, out, err := f.spec(cmd, g, target)
			if err != nil {
				return err
			}
			files, err := deploy.Render(target, spec)
			if err != nil {
				return usageError("%v", err)
			}
			if err := deploy.Write(out, files, f.force); err != nil {
				return failure("%w", err)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "wrote the %s deployment of %s (Temporal: %s) to %s:\n", target, spec.Name, spec.Temporal, out)
			for _, file := range files {
				fmt.Fprintf(w, "  %s\n", file.Path)
			}
			fmt.Fprintf(w, "next: %s — secrets to set, first-time steps (fastagent doctor), rollout, scale, backup\n", filepath.Join(out, "RUNBOOK.md"))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.out, "out", "", "folder to write to (default <dir>/deploy/<target>)")
	fl.StringVar(&f.temporal, "temporal", "self", "self (a Temporal server the deployment runs: its Helm chart, or a container with compose) or cloud (Temporal Cloud)")
	fl.StringVar(&f.name, "name", "", "the deployment's name: services, Kubernetes objects, apps, Worker Deployment (default: the workspace folder's name)")
	fl.StringVar(&f.image, "image", "", "container image the cluster runs, its tag the build ID (default <name>:v1)")
	fl.StringVar(&f.namespace, "namespace", "", "Temporal namespace (default TEMPORAL_NAMESPACE, else default; on Cloud <namespace>.<account>)")
	fl.StringVar(&f.address, "temporal-address", "", "Temporal frontend the deployment dials (default: the Temporal Helm chart's service, or Temporal Cloud's regional endpoint)")
	fl.StringVar(&f.taskQueue, "task-queue", envOr("FASTAGENT_TASK_QUEUE", "fastagent"), "Temporal task queue [FASTAGENT_TASK_QUEUE]")
	fl.StringArrayVar(&f.agents, "agent", nil, "serve another agent's folder (inside the workspace) beside this one, as name=folder; repeatable")
	fl.BoolVar(&f.force, "force", false, "overwrite files that exist")
	return cmd
}

// spec builds the rendering spec from the flags and the agent definition,
// and the output folder.
// temporalDefaults fills the namespace and frontend address a flag left
// empty: the environment's namespace, else Temporal Cloud's or the
// self-hosted defaults of the target.
func temporalDefaults(s deploy.Spec, target string) (namespace, address string) {
	namespace, address = s.Namespace, s.Address
	cloud := s.Temporal == deploy.TemporalCloud
	if namespace == "" {
		switch {
		case os.Getenv("TEMPORAL_NAMESPACE") != "":
			namespace = os.Getenv("TEMPORAL_NAMESPACE")
		case cloud:
			namespace = "your-namespace.your-account"
		default:
			namespace = "default"
		}
	}
	if address == "" {
		switch {
		case cloud:
			address = "us-east-1.aws.api.temporal.io:7233"
		case target == "compose":
			address = "temporal:7233"
		default:
			address = "temporal-frontend.temporal.svc.cluster.local:7233"
		}
	}
	return namespace, address
}

func (f *deployFlags) spec(cmd *cobra.Command, g *globals, target string) (deploy.Spec, string, error) {
	ws, err := filepath.Abs(g.dir)
	if err != nil {
		return deploy.Spec{}, "", failure("%w", err)
	}
	l, err := workspace.NewLoader(ws, g.agentDir)
	if err != nil {
		return deploy.Spec{}, "", failure("%w", err)
	}
	defer l.Close()
	l.MCP = nil // the definition's models are what matters here, not its MCP servers
	def, err := l.Load(cmd.Context())
	if err != nil {
		return deploy.Spec{}, "", failure("the agent definition does not load:\n%w", err)
	}
	s := deploy.Spec{
		Name: f.name, Image: f.image, Temporal: f.temporal, Namespace: f.namespace, Address: f.address,
		TaskQueue: f.taskQueue, Version: buildinfo.Read().Version,
	}
	if s.Name == "" {
		if s.Name = deploy.Name(filepath.Base(ws)); s.Name == "" {
			s.Name = "fastagent"
		}
	}
	if s.Image == "" {
		s.Image = s.Name + ":v1"
	} else if i := strings.LastIndex(s.Image, ":"); i <= strings.LastIndex(s.Image, "/") {
		return deploy.Spec{}, "", usageError("--image %s: give it a tag (e.g. %s:v1): the tag is the workers' build ID", s.Image, s.Image)
	}
	if s.Version == "" || strings.HasPrefix(s.Version, "(") {
		s.Version = "latest"
	}
	s.Namespace, s.Address = temporalDefaults(s, target)
	// The model: fastagent.yaml's is in the image; otherwise the
	// deployment sets FASTAGENT_MODEL (this shell's, else a default).
	specs := def.Config.ModelSpecs()
	if def.ModelSource == "" || def.ModelSource == "FASTAGENT_MODEL" {
		s.Model = def.Config.Model
		if s.Model == "" {
			s.Model = "openai/gpt-4o-mini"
			specs = append(specs, s.Model)
		}
	}
	for _, spec := range specs {
		if k := llm.KeyEnv(spec); k != "" && !slices.Contains(s.ModelKeys, k) {
			s.ModelKeys = append(s.ModelKeys, k)
		}
	}
	agents, err := serve.ParseAgents(f.agents, ws)
	if err != nil {
		return deploy.Spec{}, "", usageError("%v", err)
	}
	for _, name := range sortedKeys(agents) {
		rel, err := filepath.Rel(ws, agents[name])
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return deploy.Spec{}, "", usageError("--agent %s=%s: the folder must be inside the workspace %s, which is what the image holds", name, agents[name], ws)
		}
		s.Agents = append(s.Agents, deploy.Agent{Name: name, Dir: filepath.ToSlash(rel)})
	}
	out := f.out
	if out == "" {
		out = filepath.Join(ws, "deploy", target)
	}
	if out, err = filepath.Abs(out); err != nil {
		return deploy.Spec{}, "", failure("%w", err)
	}
	if s.Context, err = filepath.Rel(out, ws); err != nil {
		return deploy.Spec{}, "", usageError("--out %s: %v", out, err)
	}
	rel, err := filepath.Rel(ws, filepath.Join(out, "Dockerfile"))
	if err != nil {
		return deploy.Spec{}, "", usageError("--out %s: %v", out, err)
	}
	s.Context, s.Dockerfile = filepath.ToSlash(s.Context), filepath.ToSlash(rel)
	if err := s.Check(); err != nil {
		return deploy.Spec{}, "", usageError("%v", err)
	}
	return s, out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
