package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// There is no Docker engine on the build machines, so the compose file is
// checked against the CLI instead: every fastagent service runs a command the
// CLI has, with flags it accepts, and every FASTAGENT_*/TEMPORAL_*/provider
// variable it sets is one the CLI documents.
func TestComposeMatchesCLI(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Build *struct {
				Dockerfile string `yaml:"dockerfile"`
			} `yaml:"build"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, want := range []string{"postgres", "temporal", "temporal-ui", "nats", "worker", "ingress"} {
		if _, ok := compose.Services[want]; !ok {
			t.Errorf("service %q missing", want)
		}
	}
	ours := regexp.MustCompile(`^(FASTAGENT_|TEMPORAL_|OPENAI_|ANTHROPIC_|OLLAMA_)`)
	checked := 0
	for name, svc := range compose.Services {
		if svc.Build == nil || svc.Build.Dockerfile != "deploy/Dockerfile" {
			continue
		}
		checked++
		if len(svc.Command) == 0 {
			t.Errorf("%s: no command", name)
			continue
		}
		root := newRoot()
		cmd, rest, err := root.Find(svc.Command)
		if err != nil || cmd == root {
			t.Errorf("%s: command %v is not a fastagent command: %v", name, svc.Command, err)
			continue
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%s: flags %v rejected: %v", name, rest, err)
		}
		documented := documentedEnv(cmd)
		for k := range svc.Environment {
			if ours.MatchString(k) && !slices.Contains(documented, k) {
				t.Errorf("%s: environment %s is not documented by `fastagent %s --help`", name, k, cmd.Name())
			}
		}
	}
	if checked < 2 {
		t.Errorf("found %d fastagent services built from deploy/Dockerfile, want worker and ingress", checked)
	}

	// The Dockerfile's own ENV lines are CLI variables too.
	df, err := os.ReadFile("../../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	start, _, _ := newRoot().Find([]string{"start"})
	for _, m := range regexp.MustCompile(`(FASTAGENT_[A-Z_]+)=`).FindAllStringSubmatch(string(df), -1) {
		if !slices.Contains(documentedEnv(start), m[1]) {
			t.Errorf("deploy/Dockerfile sets %s, which `fastagent start` does not document", m[1])
		}
	}
	if regexp.MustCompile(`go (build|install)[^\n]*fastagent-devserver`).Match(df) || !strings.Contains(string(df), "./cmd/fastagent\n") || !strings.Contains(string(df), "USER ") {
		t.Error("deploy/Dockerfile must build fastagent alone (no dev server) and run as a non-root user")
	}
}

// The compose file is closed by default: only the ingress is published on
// all interfaces, no secret is written inline (every secret-looking value is a
// ${VAR} from the secrets env file), and the fastagent containers run with an
// init as a non-root user.
func TestComposeIsClosedByDefault(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Build       any               `yaml:"build"`
			Ports       []string          `yaml:"ports"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Init        bool              `yaml:"init"`
			User        string            `yaml:"user"`
		} `yaml:"services"`
		Configs map[string]struct {
			Content string `yaml:"content"`
		} `yaml:"configs"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	secretKey := regexp.MustCompile(`(PASSWORD|PWD|TOKEN|_KEY|SECRET)$`)
	inlineCred := regexp.MustCompile(`://[^:/@$]+:[^@${}]+@`) // user:literal-password@
	for name, svc := range compose.Services {
		for _, p := range svc.Ports {
			if name != "ingress" && !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q on every interface; bind it to 127.0.0.1 or drop it", name, p)
			}
		}
		for k, v := range svc.Environment {
			if secretKey.MatchString(k) && v != "" && !strings.HasPrefix(v, "${") {
				t.Errorf("%s: %s is written inline; take it from the secrets env file (${%s})", name, k, k)
			}
			if inlineCred.MatchString(v) {
				t.Errorf("%s: %s has an inline password: %s", name, k, v)
			}
		}
		if svc.Build != nil {
			if !svc.Init || svc.User == "" || strings.HasPrefix(svc.User, "0") || svc.User == "root" {
				t.Errorf("%s: fastagent containers need init: true and a non-root user (have init=%v user=%q)", name, svc.Init, svc.User)
			}
		}
	}
	nats := compose.Configs["nats"].Content
	if !regexp.MustCompile(`authorization\s*\{\s*token:\s*"\$\{NATS_TOKEN`).MatchString(nats) {
		t.Errorf("nats runs without a token from the secrets env file (authorization { token: \"${NATS_TOKEN}\" } in its config):\n%s", nats)
	}
}

// No secret is on a command line: /proc/<pid>/cmdline is readable by every
// process of the machine (and ps shows it), unlike a process's environment
// or a file only its container sees.
func TestComposeKeepsSecretsOffCommandLines(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Command    []string `yaml:"command"`
			Entrypoint []string `yaml:"entrypoint"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	secretVar := regexp.MustCompile(`\$\{?([A-Z_]*(PASSWORD|PWD|TOKEN|_KEY|SECRET)[A-Z_]*)`)
	for name, svc := range compose.Services {
		for _, arg := range append(append([]string{}, svc.Entrypoint...), svc.Command...) {
			if m := secretVar.FindStringSubmatch(arg); m != nil {
				t.Errorf("%s: %s is on the command line (%q): pass it in the environment or a config file", name, m[1], arg)
			}
		}
	}
}
