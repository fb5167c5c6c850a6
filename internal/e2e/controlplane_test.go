package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/fastagent/fastagent"
	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/internal/uigate"
)

// fastagent.Start with the embedded server assembles what `fastagent dev`
// does: worker, ingress, Temporal and its Web UI in one process. A turn runs
// and the ingress reads Temporal with the key; a client without the key the
// runtime wrote can do nothing on that Temporal; the Web UI opens only
// through a login link, and then shows the codec endpoint, which decodes.
func TestEmbeddedRuntimeLocksItsControlPlane(t *testing.T) {
	k := testkit.New(t)
	state := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rt, err := fastagent.Start(ctx, fastagent.Options{
		Dir: k.Dir, StateDir: state, Store: filepath.Join(state, "sessions.db"),
		Temporal: fastagent.Temporal{Embedded: true},
		HTTPAddr: "127.0.0.1:0", APIToken: "embedded-admin", Getenv: k.Getenv, Logger: quiet,
		CodecKeys: "c1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)

	k.Model.Enqueue(modelserver.Reply{Text: []string{"locked", " down"}})
	res, err := agent.Collect(rt.Agent().Invoke(ctx, agent.Scope{Session: "cp1"}, agent.Prompt{Text: "hi"}))
	if err != nil || res.Text != "locked down" {
		t.Fatalf("turn: %q %v", res.Text, err)
	}
	if code, body, _ := send(t, http.MethodGet, rt.URL()+"/sessions", "embedded-admin", "", nil); code != 200 || !strings.Contains(body, `"cp1"`) {
		t.Errorf("GET /sessions: %d %s", code, body)
	}

	key, err := os.ReadFile(filepath.Join(state, tclient.DevTokenFile))
	if err != nil {
		t.Fatalf("key file: %v", err)
	}
	addr := rt.TemporalAddress()
	for name, cfg := range map[string]tclient.Config{
		"without the key": {Address: addr, Logger: quiet},
		"with the key":    {Address: addr, Logger: quiet, APIKey: strings.TrimSpace(string(key)), Plaintext: true},
	} {
		c, err := tclient.Dial(ctx, cfg)
		if err != nil {
			t.Fatalf("%s: dial: %v", name, err)
		}
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default"})
		c.Close()
		var denied *serviceerror.PermissionDenied
		if name == "without the key" && !errors.As(err, &denied) {
			t.Errorf("%s: list: %v, want PermissionDenied", name, err)
		}
		if name == "with the key" && (err != nil || len(resp.GetExecutions()) == 0) {
			t.Errorf("%s: list: %v %v", name, resp, err)
		}
	}

	ui := "http://" + rt.WebUI()
	if resp, err := http.Get(ui + uigate.SettingsPath); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("settings without the login: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	link, err := rt.WebUILogin()
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	if resp, err := browser.Get(link); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("login: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	resp, err := browser.Get(ui + uigate.SettingsPath)
	if err != nil {
		t.Fatal(err)
	}
	var settings struct{ Codec struct{ Endpoint string } }
	err = json.NewDecoder(resp.Body).Decode(&settings)
	resp.Body.Close()
	if err != nil || !strings.HasPrefix(settings.Codec.Endpoint, rt.URL()+"/codec/dev/") {
		t.Fatalf("settings after the login: codec endpoint %q (%v)", settings.Codec.Endpoint, err)
	}
	plain := `{"payloads":[{"metadata":{"encoding":"` + base64.StdEncoding.EncodeToString([]byte("json/plain")) + `"},"data":"` +
		base64.StdEncoding.EncodeToString([]byte(`"x"`)) + `"}]}`
	if code, body, _ := send(t, http.MethodPost, settings.Codec.Endpoint+"/decode", "", plain, map[string]string{"Content-Type": "application/json"}); code != 200 {
		t.Errorf("the UI's codec endpoint: %d %s", code, body)
	}
}
