package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// memory list, export and rm send the API's requests with the token and
// print its answers; the ingress's refusal is the error.
func TestMemoryCommands(t *testing.T) {
	var mu sync.Mutex
	var reqs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reqs = append(reqs, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/memories":
			_, _ = w.Write([]byte(`{"memories":[{"id":"mem_1","agent":"fastagent","owner":"alice","text":"alice deploys on fridays","tags":["ops"],"created":"2026-01-02T03:04:05Z"},` +
				`{"id":"mem_2","agent":"fastagent","text":"the team meets at ten","created":"2026-01-02T03:04:05Z"}]}`))
		case r.Method == http.MethodDelete && r.URL.Path == "/memories/mem_1":
			_, _ = w.Write([]byte(`{"forgotten":{"id":"mem_1"}}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"no memory \"mem_9\" of yours (shared memories are deleted by an admin)","code":"not_found"}`))
		}
	}))
	t.Cleanup(srv.Close)
	t.Setenv("FASTAGENT_API_TOKEN", "alice-tok")

	out, errOut, code := execute(t, "", "memory", "--url", srv.URL, "list", "-q", "deploys", "--principal", "alice")
	if code != 0 || !strings.Contains(out, "mem_1") || !strings.Contains(out, "fridays") || !strings.Contains(out, "(shared)") {
		t.Fatalf("memory list: code %d, out %q, err %q", code, out, errOut)
	}
	file := filepath.Join(t.TempDir(), "m.jsonl")
	if _, errOut, code = execute(t, "", "memory", "--url", srv.URL, "export", "-o", file); code != 0 {
		t.Fatalf("memory export: code %d, err %q", code, errOut)
	}
	if b, err := os.ReadFile(file); err != nil || strings.Count(string(b), "\n") != 2 || !strings.Contains(string(b), `"tags":["ops"]`) {
		t.Fatalf("export file %q, %v", b, err)
	}
	if out, errOut, code = execute(t, "", "memory", "--url", srv.URL, "rm", "mem_1"); code != 0 || !strings.Contains(out, "forgot mem_1") {
		t.Fatalf("rm: code %d, out %q, err %q", code, out, errOut)
	}
	if _, errOut, code = execute(t, "", "memory", "--url", srv.URL, "rm", "mem_9"); code == 0 || !strings.Contains(errOut, "no memory") {
		t.Fatalf("rm of another's memory: code %d, err %q", code, errOut)
	}
	n := len(reqs)
	if _, _, code = execute(t, "", "memory", "--url", srv.URL, "list", "--limit", "0"); code == 0 || len(reqs) != n {
		t.Fatal("memory list --limit 0 succeeded or sent a request")
	}
	want := []string{
		"GET /memories?limit=50&principal=alice&q=deploys Bearer alice-tok",
		"GET /memories?limit=500 Bearer alice-tok",
		"DELETE /memories/mem_1 Bearer alice-tok",
	}
	for i, w := range want {
		if reqs[i] != w {
			t.Errorf("request %d = %q, want %q", i, reqs[i], w)
		}
	}
}
