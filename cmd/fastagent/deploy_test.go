package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/tclient"
)

// copyExample copies the example agent into a new workspace.
func copyExample(t *testing.T) string {
	t.Helper()
	src := filepath.Join("..", "..", "examples", "custom-tool", "agent")
	dir := filepath.Join(t.TempDir(), "support-bot")
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "agents", "helper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agents", "helper", "persona.md"), []byte("You help.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// deploy writes a target's files and a runbook for the example agent;
// run again it refuses (exit 1), names the files and changes none of them;
// --force overwrites.
func TestDeployWritesAndRefusesToOverwrite(t *testing.T) {
	dir := copyExample(t)
	for _, target := range []string{"compose", "kubernetes", "helm", "fly", "railway"} {
		out, errOut, code := execute(t, "", "-C", dir, "deploy", target, "--agent", "helper="+filepath.Join(dir, "agents", "helper"))
		if code != 0 {
			t.Fatalf("deploy %s: exit %d\n%s%s", target, code, out, errOut)
		}
		runbook, err := os.ReadFile(filepath.Join(dir, "deploy", target, "RUNBOOK.md"))
		if err != nil || !strings.Contains(string(runbook), "fastagent doctor") {
			t.Fatalf("deploy %s: RUNBOOK.md %v\n%s", target, err, runbook)
		}
		if !strings.Contains(out, "support-bot") || !strings.Contains(out, "RUNBOOK.md") {
			t.Errorf("deploy %s: output %q names neither the deployment nor the runbook", target, out)
		}
	}
	runbook := filepath.Join(dir, "deploy", "kubernetes", "RUNBOOK.md")
	if err := os.WriteFile(runbook, []byte("my notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := execute(t, "", "-C", dir, "deploy", "kubernetes")
	if code != exitFailure || !strings.Contains(errOut, "RUNBOOK.md") || !strings.Contains(errOut, "--force") || !strings.Contains(errOut, "nothing was written") {
		t.Fatalf("deploy over existing files: exit %d %q, want 1 naming them and --force", code, errOut)
	}
	if b, _ := os.ReadFile(runbook); string(b) != "my notes" {
		t.Fatalf("RUNBOOK.md = %q, want the operator's edit kept", b)
	}
	if _, errOut, code = execute(t, "", "-C", dir, "deploy", "kubernetes", "--force"); code != 0 {
		t.Fatalf("deploy --force: exit %d %s", code, errOut)
	}
	if b, _ := os.ReadFile(runbook); string(b) == "my notes" {
		t.Fatal("--force did not overwrite")
	}
	for _, args := range [][]string{{"deploy"}, {"deploy", "nomad"}, {"deploy", "helm", "--temporal", "mars"}, {"deploy", "helm", "--image", "agent"}, {"deploy", "helm", "--agent", "x=" + t.TempDir()}} {
		if _, errOut, code := execute(t, "", append([]string{"-C", dir}, args...)...); code != exitUsage {
			t.Errorf("%v: exit %d %s, want a usage error", args, code, errOut)
		}
	}
}

// Every fastagent variable the rendered compose file and fly.toml set is
// one `fastagent worker` or `fastagent ingress` documents, and each
// service runs a command the CLI accepts.
func TestDeployUsesTheCLIsVariables(t *testing.T) {
	dir := copyExample(t)
	for _, temporal := range []string{"self", "cloud"} {
		out := filepath.Join(t.TempDir(), temporal)
		if _, errOut, code := execute(t, "", "-C", dir, "deploy", "compose", "--temporal", temporal, "--out", out); code != 0 {
			t.Fatalf("deploy compose: %s", errOut)
		}
		b, err := os.ReadFile(filepath.Join(out, "fastagent.compose.yml"))
		if err != nil {
			t.Fatal(err)
		}
		var compose struct {
			Services map[string]struct {
				Command     []string          `yaml:"command"`
				Environment map[string]string `yaml:"environment"`
			} `yaml:"services"`
		}
		if err := yaml.Unmarshal(b, &compose); err != nil {
			t.Fatal(err)
		}
		ours := regexp.MustCompile(`^(FASTAGENT_|TEMPORAL_)`)
		for _, name := range []string{"worker", "ingress"} {
			svc := compose.Services[name]
			cmd, rest, err := newRoot().Find(svc.Command[1:])
			if err != nil || cmd.Name() != name {
				t.Fatalf("%s: command %v: %v", name, svc.Command, err)
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Errorf("%s: flags %v: %v", name, rest, err)
			}
			documented := documentedEnv(cmd)
			for k := range svc.Environment {
				if ours.MatchString(k) && !slices.Contains(documented, k) {
					t.Errorf("%s (--temporal %s): %s is not documented by `fastagent %s --help`", name, temporal, k, name)
				}
			}
		}
	}
}

// `fastagent doctor` against a dev server — found as `fastagent dev` leaves
// it: its key in <state-dir>/temporal-token — passes every check and exits
// 0; against one without the search attributes it exits 1 naming --fix,
// `doctor --fix` registers them, and it passes again.
func TestDoctorCommandAgainstTheDevServer(t *testing.T) {
	dir := copyExample(t)
	stateDir := filepath.Join(dir, ".fastagent")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FASTAGENT_MODEL", "openai/gpt-4o-mini")
	t.Setenv("OPENAI_API_KEY", "sk-test")
	for _, registered := range []bool{true, false} {
		s, err := devserver.Start(context.Background(), devserver.Options{UIPort: -1, LogWriter: io.Discard,
			NoSearchAttributes: !registered, KeyFile: filepath.Join(stateDir, tclient.DevTokenFile)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		args := []string{"-C", dir, "doctor", "--temporal-address", s.FrontendAddress(), "--namespace", s.Namespace()}
		out, errOut, code := execute(t, "", args...)
		if registered {
			if code != 0 || !strings.Contains(out, "all checks passed") {
				t.Fatalf("doctor against the dev server: exit %d\n%s%s", code, out, errOut)
			}
			s.Stop()
			continue
		}
		if code != exitFailure || !strings.Contains(out, "FAIL   search attributes") || !strings.Contains(out, "--fix") {
			t.Fatalf("doctor without the search attributes: exit %d, want 1 naming --fix\n%s%s", code, out, errOut)
		}
		if out, errOut, code = execute(t, "", append(args, "--fix")...); code != 0 || !strings.Contains(out, "fixed  search attributes") {
			t.Fatalf("doctor --fix: exit %d\n%s%s", code, out, errOut)
		}
		if out, errOut, code = execute(t, "", args...); code != 0 || !strings.Contains(out, "all checks passed") {
			t.Fatalf("doctor after --fix: exit %d\n%s%s", code, out, errOut)
		}
		s.Stop()
	}
}
