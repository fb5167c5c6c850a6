package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// session resend POSTs the turn's resend route (its key escaped) and says
// what it did; the ingress's refusal (no failed reply) is the error.
func TestSessionResend(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.EscapedPath())
		if strings.Contains(r.URL.Path, "nope") {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"turn \"nope\" has no failed channel reply to send again","code":"not_found"}`))
			return
		}
		_, _ = w.Write([]byte(`{"resent":"hook:orders:msg_1"}`))
	}))
	t.Cleanup(srv.Close)
	t.Setenv("FASTAGENT_API_TOKEN", "")
	out, errOut, code := execute(t, "", "session", "--url", srv.URL, "resend", "hook:orders", "hook:orders:msg_1")
	if code != 0 || !strings.Contains(out, "hook:orders:msg_1") {
		t.Fatalf("resend: code %d, out %q, err %q", code, out, errOut)
	}
	if _, errOut, code = execute(t, "", "session", "--url", srv.URL, "resend", "hook:orders", "nope"); code == 0 || !strings.Contains(errOut, "no failed channel reply") {
		t.Errorf("resend of a turn without a failed reply: code %d, err %q", code, errOut)
	}
	if len(paths) != 2 || paths[0] != "POST /sessions/hook:orders/turns/hook:orders:msg_1/resend" {
		t.Errorf("requests %q", paths)
	}
}
