package validate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/sirupsen/logrus"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	chartloader "helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/fastagent/fastagent/internal/deploy"
)

// specs are the renderings checked: the example agent alone
// (examples/custom-tool/agent as `fastagent deploy` sees it) and with an
// agent served beside it, each with a self-hosted Temporal and with
// Temporal Cloud.
func specs(target string) map[string]deploy.Spec {
	out := map[string]deploy.Spec{}
	for _, temporal := range []string{deploy.TemporalSelf, deploy.TemporalCloud} {
		for _, siblings := range []bool{false, true} {
			s := deploy.Spec{
				Name: "agent", Image: "agent:v1", Version: "latest", Temporal: temporal,
				Namespace: "default", Address: "temporal-frontend.temporal.svc.cluster.local:7233", TaskQueue: "fastagent",
				Model: "openai/gpt-4o-mini", ModelKeys: []string{"OPENAI_API_KEY"},
				Context: "../..", Dockerfile: "deploy/" + target + "/Dockerfile",
			}
			if temporal == deploy.TemporalCloud {
				s.Namespace, s.Address = "agent-prod.a1b2c", "us-east-1.aws.api.temporal.io:7233"
			}
			name := temporal
			if siblings {
				s.Agents = []deploy.Agent{{Name: "helper", Dir: "agents/helper"}}
				name += "+helper"
			}
			out[name] = s
		}
	}
	return out
}

// render writes target's files for s into a fresh folder (as deploy does).
func render(t *testing.T, target string, s deploy.Spec) string {
	t.Helper()
	files, err := deploy.Render(target, s)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "deploy", target)
	if err := deploy.Write(dir, files, false); err != nil {
		t.Fatal(err)
	}
	return dir
}

// decodeStrict decodes one Kubernetes object into its k8s.io/api type,
// refusing unknown fields, and returns it.
func decodeStrict(t *testing.T, where string, doc []byte) any {
	t.Helper()
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	var obj any
	switch head.APIVersion + "/" + head.Kind {
	case "apps/v1/Deployment":
		obj = &appsv1.Deployment{}
	case "v1/Service":
		obj = &corev1.Service{}
	case "v1/ConfigMap":
		obj = &corev1.ConfigMap{}
	case "networking.k8s.io/v1/Ingress":
		obj = &networkingv1.Ingress{}
	case "networking.k8s.io/v1/NetworkPolicy":
		obj = &networkingv1.NetworkPolicy{}
	case "policy/v1/PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "keda.sh/v1alpha1/ScaledObject":
		obj = &scaledObject{}
	case "keda.sh/v1alpha1/TriggerAuthentication":
		obj = &triggerAuthentication{}
	default:
		t.Fatalf("%s: unexpected object %s %s (a Secret or anything else must not be rendered)", where, head.APIVersion, head.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatalf("%s: %s does not decode strictly: %v", where, head.Kind, err)
	}
	return obj
}

// documents splits a multi-document YAML file.
func documents(t *testing.T, where string, data []byte) [][]byte {
	t.Helper()
	r := k8syaml.NewYAMLReader(bufioReader(data))
	var out [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			out = append(out, doc)
		}
	}
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}

// checkObjects applies the rules every Kubernetes rendering keeps to its
// decoded objects.
func checkObjects(t *testing.T, where string, objs []any, cloud bool) {
	t.Helper()
	kinds := map[string]int{}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			kinds["Deployment"]++
			checkPod(t, where+": "+o.Name, o.Spec.Template.Spec)
		case *networkingv1.NetworkPolicy:
			kinds["NetworkPolicy"]++
			if !slices.Contains(o.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
				t.Errorf("%s: NetworkPolicy %s does not restrict egress", where, o.Name)
			}
		case *policyv1.PodDisruptionBudget:
			kinds["PodDisruptionBudget"]++
		case *corev1.Service:
			kinds["Service"]++
		case *scaledObject:
			kinds["ScaledObject"]++
			if o.Spec.MinReplicaCount == nil || *o.Spec.MinReplicaCount < 1 {
				t.Errorf("%s: ScaledObject %s may scale workers to zero", where, o.Metadata.Name)
			}
			for _, tr := range o.Spec.Triggers {
				if tr.Type != "temporal" || tr.Metadata["taskQueue"] == "" || tr.Metadata["endpoint"] == "" {
					t.Errorf("%s: trigger %+v is not KEDA's temporal scaler on a task queue", where, tr)
				}
				if cloud && (tr.AuthenticationRef == nil || tr.Metadata["enableTLS"] != "true") {
					t.Errorf("%s: a Temporal Cloud trigger without API-key authentication and TLS", where)
				}
			}
		}
	}
	if kinds["Deployment"] < 2 || kinds["NetworkPolicy"] < 2 || kinds["PodDisruptionBudget"] < 2 || kinds["Service"] < 1 {
		t.Errorf("%s: objects %v, want worker and ingress Deployments, their NetworkPolicies and PodDisruptionBudgets, a Service", where, kinds)
	}
}

// checkPod: non-root, RuntimeDefault seccomp, read-only root, no
// privilege escalation, probes on /health, secrets by reference only.
func checkPod(t *testing.T, where string, pod corev1.PodSpec) {
	t.Helper()
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod securityContext %+v, want runAsNonRoot and seccompProfile RuntimeDefault", where, psc)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s: the service account token is mounted", where)
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s/%s: container securityContext %+v, want a read-only root, no privilege escalation, every capability dropped", where, c.Name, sc)
		}
		for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" {
				t.Errorf("%s/%s: probe %+v, want GET /health", where, c.Name, p)
			}
		}
		for _, e := range c.Env {
			if e.Value != "" && (strings.Contains(e.Name, "KEY") || strings.Contains(e.Name, "TOKEN") || e.Name == "FASTAGENT_STORE" || e.Name == "FASTAGENT_FEED") {
				t.Errorf("%s/%s: secret %s given by value", where, c.Name, e.Name)
			}
		}
		if len(c.Args) < 2 || c.Args[0] != "fastagent" || (c.Args[1] != "worker" && c.Args[1] != "ingress") {
			t.Errorf("%s/%s: args %v, want fastagent worker or fastagent ingress", where, c.Name, c.Args)
		}
	}
}

func TestKubernetesManifestsDecodeStrictly(t *testing.T) {
	for name, s := range specs("kubernetes") {
		t.Run(name, func(t *testing.T) {
			dir := render(t, "kubernetes", s)
			var objs []any
			err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
					return err
				}
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				for i, doc := range documents(t, p, data) {
					objs = append(objs, decodeStrict(t, fmt.Sprintf("%s#%d", filepath.Base(p), i), doc))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			checkObjects(t, name, objs, s.Temporal == deploy.TemporalCloud)
		})
	}
}

// The chart lints clean (helm lint, strict: warnings fail) and renders,
// with its defaults and with every option on, to objects that decode
// strictly into k8s.io/api types.
func TestHelmChartLintsAndRenders(t *testing.T) {
	for name, s := range specs("helm") {
		t.Run(name, func(t *testing.T) {
			dir := render(t, "helm", s)
			everything := map[string]any{
				"worker":  map[string]any{"builds": []any{"v1", "v2"}, "keda": map[string]any{"enabled": true}},
				"ingress": map[string]any{"ingress": map[string]any{"enabled": true, "className": "nginx", "annotations": map[string]any{"cert-manager.io/cluster-issuer": "letsencrypt"}}},
			}
			for _, vals := range []map[string]any{{}, everything} {
				// helm lint --strict: a warning fails too.
				for _, m := range lint.RunAll(dir, vals, "agents").Messages {
					if m.Severity >= support.WarningSev {
						t.Errorf("helm lint --strict: %s", m)
					} else {
						t.Logf("helm lint: %s", m)
					}
				}
				ch, err := chartloader.LoadDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				rv, err := util.ToRenderValues(ch, vals, common.ReleaseOptions{Name: s.Name, Namespace: "agents", IsInstall: true}, common.DefaultCapabilities)
				if err != nil {
					t.Fatal(err)
				}
				out, err := engine.Render(ch, rv)
				if err != nil {
					t.Fatalf("helm template: %v", err)
				}
				var objs []any
				for _, file := range slices.Sorted(mapKeys(out)) {
					if !strings.HasSuffix(file, ".yaml") {
						continue
					}
					for i, doc := range documents(t, file, []byte(out[file])) {
						objs = append(objs, decodeStrict(t, fmt.Sprintf("%s#%d", file, i), doc))
					}
				}
				checkObjects(t, name, objs, s.Temporal == deploy.TemporalCloud)
			}
		})
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// The compose file loads through compose-go (the library of Docker
// Compose) with the env file's variables, without a warning, and keeps
// worker and ingress apart, confined, with secrets from the env file.
func TestComposeLoadsWithoutWarnings(t *testing.T) {
	for name, s := range specs("compose") {
		t.Run(name, func(t *testing.T) {
			dir := render(t, "compose", s)
			env := map[string]string{
				"POSTGRES_PASSWORD": "p", "STORE_PASSWORD": "s", "NATS_TOKEN": "n", "FASTAGENT_API_TOKENS": "t",
				"FASTAGENT_CODEC_KEYS": "", "OPENAI_API_KEY": "k", "FASTAGENT_MODEL": "openai/gpt-4o-mini",
				"TEMPORAL_ADDRESS": s.Address, "TEMPORAL_NAMESPACE": s.Namespace, "TEMPORAL_API_KEY": "a",
			}
			// Every variable the env file names is one the compose file reads.
			example, err := os.ReadFile(filepath.Join(dir, ".env.example"))
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(example), "\n") {
				if k, _, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
					if _, known := env[k]; !known {
						t.Errorf(".env.example names %s, which the test does not set", k)
					}
				}
			}
			var warnings bytes.Buffer
			logrus.SetOutput(&warnings)
			defer logrus.SetOutput(os.Stderr)
			p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
				WorkingDir:  dir,
				ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "fastagent.compose.yml")}},
				Environment: env,
			})
			if err != nil {
				t.Fatalf("compose-go: %v", err)
			}
			if warnings.Len() > 0 {
				t.Fatalf("compose-go warned:\n%s", warnings.String())
			}
			for _, svc := range []string{"worker", "ingress", "postgres", "nats"} {
				if _, ok := p.Services[svc]; !ok {
					t.Errorf("service %s missing", svc)
				}
			}
			if _, ok := p.Services["temporal"]; ok == (s.Temporal == deploy.TemporalCloud) {
				t.Errorf("temporal service present = %v with --temporal %s", ok, s.Temporal)
			}
			for _, svc := range []string{"worker", "ingress"} {
				c := p.Services[svc]
				if !c.ReadOnly || c.User != "10001:10001" || !slices.Contains(c.CapDrop, "ALL") || c.Build == nil || c.Build.Dockerfile != s.Dockerfile {
					t.Errorf("%s: read_only=%v user=%q cap_drop=%v build=%+v", svc, c.ReadOnly, c.User, c.CapDrop, c.Build)
				}
				if len(c.Command) < 2 || c.Command[0] != "fastagent" || c.Command[1] != svc {
					t.Errorf("%s: command %v", svc, c.Command)
				}
			}
			if p.Services["worker"].Environment["OPENAI_API_KEY"] == nil || p.Services["ingress"].Environment["OPENAI_API_KEY"] != nil {
				t.Error("the model key must reach the worker only")
			}
			if len(p.Services["worker"].Ports) > 0 {
				t.Error("the worker publishes a port")
			}
		})
	}
}

// flyConfig is fly.toml's documented keys (fly.io/docs/reference/configuration).
type flyConfig struct {
	App           string            `toml:"app"`
	PrimaryRegion string            `toml:"primary_region"`
	KillSignal    string            `toml:"kill_signal"`
	KillTimeout   string            `toml:"kill_timeout"`
	Build         map[string]string `toml:"build"`
	Deploy        struct {
		Strategy string `toml:"strategy"`
	} `toml:"deploy"`
	Env          map[string]string `toml:"env"`
	Processes    map[string]string `toml:"processes"`
	Experimental struct {
		Cmd []string `toml:"cmd"`
	} `toml:"experimental"`
	Files []struct {
		GuestPath string `toml:"guest_path"`
		LocalPath string `toml:"local_path"`
	} `toml:"files"`
	HTTPService *struct {
		Processes          []string `toml:"processes"`
		InternalPort       int      `toml:"internal_port"`
		ForceHTTPS         bool     `toml:"force_https"`
		AutoStopMachines   string   `toml:"auto_stop_machines"`
		AutoStartMachines  bool     `toml:"auto_start_machines"`
		MinMachinesRunning int      `toml:"min_machines_running"`
		Checks             []struct {
			GracePeriod string `toml:"grace_period"`
			Interval    string `toml:"interval"`
			Method      string `toml:"method"`
			Path        string `toml:"path"`
			Timeout     string `toml:"timeout"`
		} `toml:"checks"`
	} `toml:"http_service"`
	Checks map[string]struct {
		Processes   []string `toml:"processes"`
		Type        string   `toml:"type"`
		Port        int      `toml:"port"`
		Path        string   `toml:"path"`
		Interval    string   `toml:"interval"`
		Timeout     string   `toml:"timeout"`
		GracePeriod string   `toml:"grace_period"`
	} `toml:"checks"`
	VM []struct {
		Processes []string `toml:"processes"`
		Size      string   `toml:"size"`
		Memory    string   `toml:"memory"`
	} `toml:"vm"`
}

func TestFlyConfigs(t *testing.T) {
	for name, s := range specs("fly") {
		t.Run(name, func(t *testing.T) {
			dir := render(t, "fly", s)
			for _, file := range []string{"fly.toml", "nats.fly.toml"} {
				var c flyConfig
				md, err := toml.DecodeFile(filepath.Join(dir, file), &c)
				if err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				if u := md.Undecoded(); len(u) > 0 {
					t.Errorf("%s: keys outside fly.toml's documented schema: %v", file, u)
				}
				if file != "fly.toml" {
					continue
				}
				if !strings.HasPrefix(c.Processes["worker"], "fastagent worker") || !strings.HasPrefix(c.Processes["ingress"], "fastagent ingress") {
					t.Errorf("processes %v", c.Processes)
				}
				if c.HTTPService == nil || !slices.Equal(c.HTTPService.Processes, []string{"ingress"}) || c.HTTPService.AutoStopMachines != "off" || c.HTTPService.MinMachinesRunning < 1 {
					t.Errorf("http_service %+v: want it on the ingress only, never stopped", c.HTTPService)
				}
				for k := range c.Env {
					if strings.Contains(k, "KEY") || strings.Contains(k, "TOKEN") || k == "FASTAGENT_STORE" || k == "FASTAGENT_FEED" {
						t.Errorf("secret %s in [env]", k)
					}
				}
			}
		})
	}
}

// railwayConfig is railway.json's documented keys
// (https://railway.com/railway.schema.json, docs.railway.com/config-as-code).
type railwayConfig struct {
	Schema string `json:"$schema"`
	Build  struct {
		Builder        string `json:"builder"`
		DockerfilePath string `json:"dockerfilePath"`
	} `json:"build"`
	Deploy struct {
		StartCommand       string `json:"startCommand"`
		NumReplicas        int    `json:"numReplicas"`
		SleepApplication   *bool  `json:"sleepApplication"`
		HealthcheckPath    string `json:"healthcheckPath"`
		HealthcheckTimeout int    `json:"healthcheckTimeout"`
		RestartPolicyType  string `json:"restartPolicyType"`
		DrainingSeconds    int    `json:"drainingSeconds"`
	} `json:"deploy"`
}

func TestRailwayConfigs(t *testing.T) {
	for name, s := range specs("railway") {
		t.Run(name, func(t *testing.T) {
			dir := render(t, "railway", s)
			for _, role := range []string{"worker", "ingress"} {
				b, err := os.ReadFile(filepath.Join(dir, "railway."+role+".json"))
				if err != nil {
					t.Fatal(err)
				}
				dec := json.NewDecoder(bytes.NewReader(b))
				dec.DisallowUnknownFields()
				var c railwayConfig
				if err := dec.Decode(&c); err != nil {
					t.Fatalf("railway.%s.json: %v", role, err)
				}
				if c.Build.Builder != "DOCKERFILE" || c.Build.DockerfilePath != s.Dockerfile ||
					!slices.Contains([]string{"ON_FAILURE", "ALWAYS", "NEVER"}, c.Deploy.RestartPolicyType) {
					t.Errorf("railway.%s.json: %+v", role, c)
				}
				if c.Deploy.SleepApplication == nil || *c.Deploy.SleepApplication || c.Deploy.NumReplicas < 1 {
					t.Errorf("railway.%s.json: the service may sleep or scale to zero", role)
				}
				if !strings.HasPrefix(c.Deploy.StartCommand, "fastagent "+role) {
					t.Errorf("railway.%s.json: start command %q", role, c.Deploy.StartCommand)
				}
			}
		})
	}
}
