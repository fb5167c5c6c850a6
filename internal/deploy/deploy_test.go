package deploy_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/deploy"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// Spec is the spec the golden files are rendered from: the example agent
// (examples/custom-tool/agent) with a sibling agent, as `fastagent deploy`
// builds it with --out deploy/<target>.
func Spec(target, temporal string) deploy.Spec {
	s := deploy.Spec{
		Name: "agent", Image: "registry.example.com/team/agent:v1", Version: "v0.1.0",
		Temporal: temporal, Namespace: "default", Address: "temporal-frontend.temporal.svc.cluster.local:7233",
		TaskQueue: "fastagent", Model: "openai/gpt-4o-mini", ModelKeys: []string{"OPENAI_API_KEY"},
		Agents:  []deploy.Agent{{Name: "helper", Dir: "agents/helper"}},
		Context: "../..", Dockerfile: "deploy/" + target + "/Dockerfile",
	}
	if target == "compose" {
		s.Address = "temporal:7233"
	}
	if temporal == deploy.TemporalCloud {
		s.Namespace, s.Address = "agent-prod.a1b2c", "us-east-1.aws.api.temporal.io:7233"
	}
	return s
}

// Every target renders for both Temporal modes, byte for byte as the golden
// files pin it (go test ./internal/deploy -update rewrites them).
func TestGolden(t *testing.T) {
	for _, target := range deploy.Targets {
		for _, temporal := range []string{deploy.TemporalSelf, deploy.TemporalCloud} {
			t.Run(target+"-"+temporal, func(t *testing.T) {
				files, err := deploy.Render(target, Spec(target, temporal))
				if err != nil {
					t.Fatal(err)
				}
				dir := filepath.Join("testdata", "golden", target+"-"+temporal)
				if *update {
					if err := os.RemoveAll(dir); err != nil {
						t.Fatal(err)
					}
					if err := deploy.Write(dir, files, false); err != nil {
						t.Fatal(err)
					}
					return
				}
				var want []string
				err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
					if err == nil && !d.IsDir() {
						rel, _ := filepath.Rel(dir, p)
						want = append(want, filepath.ToSlash(rel))
					}
					return err
				})
				if err != nil {
					t.Fatalf("%v (run go test ./internal/deploy -update)", err)
				}
				var got []string
				for _, f := range files {
					got = append(got, f.Path)
					b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
					if err != nil {
						t.Errorf("%s: not in the golden files (run go test ./internal/deploy -update)", f.Path)
						continue
					}
					if string(b) != string(f.Data) {
						t.Errorf("%s differs from its golden file (run go test ./internal/deploy -update and review the diff)", f.Path)
					}
				}
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("files = %v, golden files = %v", got, want)
				}
			})
		}
	}
}

// What every target must say: worker and ingress apart, secrets by name
// and never a value, workers that do not scale to zero, a runbook.
func TestTargetsKeepTheRules(t *testing.T) {
	for _, target := range deploy.Targets {
		for _, temporal := range []string{deploy.TemporalSelf, deploy.TemporalCloud} {
			files, err := deploy.Render(target, Spec(target, temporal))
			if err != nil {
				t.Fatal(err)
			}
			all := map[string]string{}
			for _, f := range files {
				all[f.Path] = string(f.Data)
			}
			name := target + "-" + temporal
			for _, want := range []string{"RUNBOOK.md", "Dockerfile", "Dockerfile.dockerignore"} {
				if all[want] == "" {
					t.Errorf("%s: no %s", name, want)
				}
			}
			runbook := all["RUNBOOK.md"]
			for _, section := range []string{"## Secrets", "## First time", "## Roll out", "## Scale", "## Back up", "fastagent doctor"} {
				if !strings.Contains(runbook, section) && !(section == "## Secrets" && strings.Contains(runbook, "## Variables")) {
					t.Errorf("%s: RUNBOOK.md lacks %q", name, section)
				}
			}
			joined := strings.Join(slices.Collect(mapValues(all)), "\n")
			if !strings.Contains(joined, "fastagent\", \"worker\"") && !strings.Contains(joined, "fastagent worker") && !strings.Contains(joined, "- worker") {
				t.Errorf("%s: no worker command", name)
			}
			if !strings.Contains(joined, "ingress") {
				t.Errorf("%s: no ingress", name)
			}
			if strings.Contains(joined, "minReplicaCount: 0") || strings.Contains(joined, `"sleepApplication": true`) || strings.Contains(joined, "replicas: 0") {
				t.Errorf("%s: workers may scale to zero", name)
			}
			if temporal == deploy.TemporalCloud && !strings.Contains(joined, "TEMPORAL_API_KEY") {
				t.Errorf("%s: Temporal Cloud without TEMPORAL_API_KEY", name)
			}
		}
	}
}

func mapValues(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// Write never replaces a file without force: it names the files that are
// there, writes none of the others, and with force writes them all.
func TestWriteRefusesExistingFiles(t *testing.T) {
	dir := t.TempDir()
	files := []deploy.File{{Path: "a.yaml", Data: []byte("new a")}, {Path: "sub/b.yaml", Data: []byte("new b")}}
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := deploy.Write(dir, files, false)
	if !errors.Is(err, deploy.ErrExists) || !strings.Contains(err.Error(), "a.yaml") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("Write over an existing file = %v, want ErrExists naming a.yaml and --force", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.yaml")); string(b) != "mine" {
		t.Errorf("a.yaml = %q, want it untouched", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub", "b.yaml")); !os.IsNotExist(err) {
		t.Errorf("sub/b.yaml was written although Write refused: %v", err)
	}
	if err := deploy.Write(dir, files, true); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if b, _ := os.ReadFile(filepath.Join(dir, f.Path)); string(b) != string(f.Data) {
			t.Errorf("%s = %q after --force, want %q", f.Path, b, f.Data)
		}
	}
}

func TestSpecChecks(t *testing.T) {
	ok := Spec("kubernetes", deploy.TemporalSelf)
	for _, tc := range []struct {
		name   string
		change func(*deploy.Spec)
		want   string
	}{
		{"bad name", func(s *deploy.Spec) { s.Name = "Agent_1" }, "deployment name"},
		{"bad temporal", func(s *deploy.Spec) { s.Temporal = "elsewhere" }, "--temporal"},
		{"agent outside", func(s *deploy.Spec) { s.Agents = []deploy.Agent{{Name: "x", Dir: "../x"}} }, "inside the workspace"},
	} {
		s := ok
		tc.change(&s)
		if _, err := deploy.Render("kubernetes", s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Render = %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := deploy.Render("nomad", ok); err == nil || !strings.Contains(err.Error(), "compose, kubernetes, helm, fly, railway") {
		t.Errorf("unknown target: %v", err)
	}
	for in, want := range map[string]string{"My Agent": "my-agent", "agent": "agent", "42": "", "support_bot-": "support-bot"} {
		if got := deploy.Name(in); got != want {
			t.Errorf("Name(%q) = %q, want %q", in, got, want)
		}
	}
}
