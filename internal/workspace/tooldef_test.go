package workspace

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/toolrun"
	"github.com/fastagent/fastagent/internal/tools"
)

const goodManifest = `description: Look up a city's weather.
parameters:
  type: object
  properties:
    city: {type: string, description: City name}
  required: [city]
command: [./weather.sh]
timeout: 5s
idempotent: true
`

func TestBrokenToolSkipped(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		file string
		body string
		want string // in the diagnostic
	}{
		{name: "bad yaml", file: "broken.yaml", body: "description: [oops\n", want: "not valid YAML/JSON"},
		{name: "missing command", file: "broken.yaml", body: "description: does nothing\n", want: "command: missing"},
		{name: "missing description", file: "broken.yaml", body: "command: echo\n", want: "description: missing"},
		{name: "invalid schema", file: "broken.yaml", body: "description: d\ncommand: echo\nparameters:\n  properties:\n    n: {type: integr}\n", want: "parameters: not a valid JSON Schema"},
		{name: "schema not an object type", file: "broken.yaml", body: "description: d\ncommand: echo\nparameters: {type: array}\n", want: "parameters: type must be object"},
		{name: "schema not a mapping", file: "broken.yaml", body: "description: d\ncommand: echo\nparameters: [a]\n", want: "parameters: want a JSON Schema object"},
		{name: "unknown key", file: "broken.yaml", body: "description: d\ncommand: echo\nretries: 3\n", want: `line 3: unknown key "retries"`},
		{name: "bad timeout", file: "broken.yaml", body: "description: d\ncommand: echo\ntimeout: soon\n", want: `line 3: timeout: "soon" is not a duration`},
		{name: "bad command type", file: "broken.yaml", body: "description: d\ncommand: {run: x}\n", want: "command: want a command line or a list"},
		{name: "empty program", file: "broken.yaml", body: "description: d\ncommand: ['', x]\n", want: "command: the first element (the program) is empty"},
		{name: "name mismatch", file: "broken.yaml", body: "name: other\ndescription: d\ncommand: echo\n", want: `name: "other" does not match the file name "broken"`},
		{name: "bad output", file: "broken.yaml", body: "description: d\ncommand: echo\noutput: xml\n", want: `output: "xml" is not text or json`},
		{name: "bad file name", file: "my tool.yaml", body: "description: d\ncommand: echo\n", want: `"my tool" is not a valid tool name`},
		{name: "bad json", file: "broken.json", body: `{"description": "d", "command": "echo",}`, want: "not valid JSON"},
		{name: "duplicate name", file: "weather.yml", body: "description: d\ncommand: echo\n", want: `tool "weather" is already defined by tools/weather.yaml`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := load(t, map[string]string{
				"tools/weather.yaml": goodManifest,
				"tools/weather.sh":   "#!/bin/sh\necho sunny\n",
				"tools/" + c.file:    c.body,
			}, nil)
			if o := origins(d)["weather"]; o != "workspace:tools/weather.yaml" {
				t.Fatalf("the good tool did not load (origin %q); diagnostics:\n%s", o, diagText(d))
			}
			var found bool
			for _, x := range d.Diagnostics {
				if x.File == filepath.Join(d.Workspace.AgentDir, "tools", c.file) && strings.Contains(x.Message, c.want) {
					found = true
				}
			}
			if !found {
				t.Fatalf("no diagnostic for tools/%s containing %q:\n%s", c.file, c.want, diagText(d))
			}
			if n := len(d.Tools); n != 5 {
				t.Errorf("%d tools loaded, want the 4 built-ins and weather", n)
			}
		})
	}
}

func TestManifestSpec(t *testing.T) {
	t.Parallel()
	d := load(t, map[string]string{
		"tools/weather.yaml": goodManifest,
		"tools/notify.json":  `{"description": "Send a notification.", "command": "cat", "sequential": true, "requiresApproval": true, "deferred": true, "output": "json"}`,
		"tools/README.md":    "not a tool",
		"tools/helper.sh":    "#!/bin/sh\n",
		"fastagent.yaml":     "tools:\n  weather:\n    timeout: 90s\n    idempotent: false\n",
	}, nil)
	if diags := diagText(d); diags != "" {
		t.Fatalf("diagnostics:\n%s", diags)
	}
	w, ok := d.Tool("weather")
	if !ok {
		t.Fatal("weather missing")
	}
	s := w.Spec()
	if s.Idempotent {
		t.Error("config idempotent: false did not override the manifest")
	}
	if want := 90*time.Second + tools.DefaultBashKillGrace + toolrun.RuntimeSlack; s.Timeout != want {
		t.Errorf("runtime timeout %v, want %v (config timeout plus grace)", s.Timeout, want)
	}
	var schema map[string]any
	if err := json.Unmarshal(s.Parameters, &schema); err != nil || schema["type"] != "object" {
		t.Fatalf("parameters %s: %v", s.Parameters, err)
	}
	if err := tools.ValidateArgs(s, json.RawMessage(`{"city": 3}`)); err == nil || !strings.Contains(err.Error(), `field "city" must be a string`) {
		t.Errorf("ValidateArgs with a wrong type: %v", err)
	}
	if err := tools.ValidateArgs(s, json.RawMessage(`{"city": "Oslo"}`)); err != nil {
		t.Errorf("ValidateArgs with good args: %v", err)
	}

	n, ok := d.Tool("notify")
	if !ok {
		t.Fatal("notify (a .json manifest) missing")
	}
	ns := n.Spec()
	if !ns.Sequential || !ns.RequiresApproval || !ns.Deferred || ns.Idempotent {
		t.Errorf("notify spec %+v", ns)
	}
	if string(ns.Parameters) != `{"type":"object","properties":{}}` {
		t.Errorf("no parameters should be an empty object schema, got %s", ns.Parameters)
	}
	if ns.Timeout != DefaultToolTimeout+tools.DefaultBashKillGrace+toolrun.RuntimeSlack {
		t.Errorf("default timeout %v", ns.Timeout)
	}
}

func TestManifestSymlinkOutsideRefused(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	writeFiles(t, outside, map[string]string{"evil.yaml": "description: d\ncommand: echo\n"})
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"tools/ok.yaml": "description: d\ncommand: echo\n"})
	if err := symlink(filepath.Join(outside, "evil.yaml"), filepath.Join(dir, "tools", "evil.yaml")); err != nil {
		t.Fatal(err)
	}
	d := loadIn(t, dir, "", "")
	if _, ok := d.Tool("evil"); ok {
		t.Error("a manifest outside the agent dir was loaded")
	}
	if _, ok := d.Tool("ok"); !ok {
		t.Error("the good tool did not load")
	}
	if !strings.Contains(diagText(d), "evil.yaml: tool manifest resolves outside the agent dir (symlink); refused") {
		t.Errorf("diagnostics:\n%s", diagText(d))
	}
}

func TestManifestCacheFollowsEdits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"tools/x.yaml": "description: first\ncommand: echo\n"})
	l, err := NewLoader(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	l.Getenv = func(string) string { return "" }
	for _, want := range []string{"first", "second"} {
		writeFiles(t, dir, map[string]string{"tools/x.yaml": "description: " + want + "\ncommand: echo\n"})
		d, err := l.Load(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		x, ok := d.Tool("x")
		if !ok || x.Spec().Description != want {
			t.Fatalf("description after edit: %v %q, want %q", ok, x.Spec().Description, want)
		}
	}
}
