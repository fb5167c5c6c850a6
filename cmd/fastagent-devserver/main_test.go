package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// As a child process: the configuration arrives on stdin, the ready line
// names where the server listens and the key file (written 0600, holding
// the key the parent sent), requests are answered line by line, and the
// server stops when stdin closes.
func TestChildProtocol(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "temporal-token")
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"--config", "-"}, inR, json.NewEncoder(outW))
		_ = outW.Close()
	}()
	cfg, _ := json.Marshal(map[string]any{
		"databaseFile": filepath.Join(dir, "temporal.db"), "uiPort": -1, "apiKey": "parent-key", "keyFile": keyFile,
		"dynamicConfig": map[string]any{"limit.maxIDLength": 1000},
	})
	if _, err := inW.Write(append(cfg, '\n')); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(outR)
	var m message
	if !lines.Scan() || json.Unmarshal(lines.Bytes(), &m) != nil || m.Ready == nil || m.Protocol != protocol {
		t.Fatalf("ready line: %q (%v)", lines.Text(), <-done)
	}
	if m.Ready.Frontend == "" || m.Ready.Namespace != "default" || m.Ready.UI != "" || m.Ready.Login != "" || m.Ready.KeyFile != keyFile {
		t.Errorf("ready: %+v", m.Ready)
	}
	if strings.Contains(lines.Text(), "parent-key") {
		t.Error("the ready line shows the key")
	}
	b, err := os.ReadFile(keyFile)
	if fi, _ := os.Stat(keyFile); err != nil || strings.TrimSpace(string(b)) != "parent-key" || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %q %v", b, err)
	}

	for _, req := range []string{`{"actions":""}`, `nonsense`, `{}`} {
		if _, err := io.WriteString(inW, req+"\n"); err != nil {
			t.Fatal(err)
		}
		var resp message
		if !lines.Scan() || json.Unmarshal(lines.Bytes(), &resp) != nil {
			t.Fatalf("no answer to %s", req)
		}
		if (req == `{"actions":""}`) != (resp.Error == "") {
			t.Errorf("%s: %q", req, lines.Text())
		}
	}

	_ = inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not stop when stdin closed")
	}
}

// A configuration with a field the server does not know is refused, so a
// parent newer than the binary is told instead of silently ignored.
func TestConfigRefusesUnknownFields(t *testing.T) {
	if _, err := decodeConfig([]byte(`{"frontendPort":1,"noSuchOption":true}`)); err == nil || !strings.Contains(err.Error(), "noSuchOption") {
		t.Fatalf("err = %v", err)
	}
	cfg, err := decodeConfig([]byte(`{"dynamicConfig":{"a":2000,"b":0.5,"c":"10s","d":[1,{"e":3}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	dc := cfg.DynamicConfig
	if _, ok := dc["a"].(int); !ok {
		t.Errorf("a whole number is %T, want int", dc["a"])
	}
	if _, ok := dc["b"].(float64); !ok {
		t.Errorf("0.5 is %T, want float64", dc["b"])
	}
	if _, ok := dc["d"].([]any)[1].(map[string]any)["e"].(int); !ok {
		t.Errorf("a nested number is %T", dc["d"].([]any)[1].(map[string]any)["e"])
	}
}

// --config takes the whole configuration.
func TestConfigExcludesFlags(t *testing.T) {
	if _, _, _, err := parse([]string{"--config", "-", "--port", "1"}, strings.NewReader("{}\n")); err == nil {
		t.Fatal("--config with --port was accepted")
	}
	cfg, fromStdin, _, err := parse([]string{"--state-dir", "/s"}, nil)
	if err != nil || fromStdin || cfg.DatabaseFile != "/s/temporal.db" || cfg.KeyFile != "/s/temporal-token" || cfg.FrontendPort != 7233 {
		t.Fatalf("%+v %v %v", cfg, fromStdin, err)
	}
}
