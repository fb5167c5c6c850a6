package ingress_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent"
	"github.com/fastagent/fastagent/ingress"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
)

// The ingress mounted under /agent/ in a plain net/http server, behind the
// program's own authentication: here a header its gateway sets. A request
// without it is refused; alice's turn streams as server-sent events; the
// events route of her follow-up carries the /agent prefix, and following
// it streams that turn.
func Example() {
	// A Temporal server with a worker serving the agent in dir, and a
	// client of your own to it (see temporalWithWorker below).
	dir, c, done := temporalWithWorker("Hello from the mounted ingress.", "And the follow-up.")
	defer done()

	fromGateway := ingress.PrincipalsFunc(func(r *http.Request) (ingress.Principal, error) {
		user := r.Header.Get("X-Gateway-User")
		if user == "" {
			return ingress.Principal{}, errors.New("sign in through the gateway first")
		}
		return ingress.Principal{Name: user, Rights: []ingress.Right{ingress.RightInvoke, ingress.RightControl}}, nil
	})
	h, err := ingress.New(c, ingress.Options{Dir: dir, Principals: fromGateway})
	if err != nil {
		fmt.Println("ingress:", err)
		return
	}
	defer h.Close()

	mux := http.NewServeMux()
	mux.Handle("/agent/", http.StripPrefix("/agent", h))
	srv := &http.Server{Handler: mux}
	srv.RegisterOnShutdown(h.Drain)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown(context.Background())
	base := "http://" + ln.Addr().String()

	call := func(method, path, user, key, body string) *http.Response {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if user != "" {
			req.Header.Set("X-Gateway-User", user)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		return resp
	}

	resp := call("POST", "/agent/invoke", "", "", `{"session":"example","text":"hi"}`)
	var refusal struct{ Error string }
	_ = json.NewDecoder(resp.Body).Decode(&refusal)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, refusal.Error)

	resp = call("POST", "/agent/invoke", "alice", "", `{"session":"example","text":"Say hello."}`)
	fmt.Println(readTurn(resp))

	resp = call("POST", "/agent/sessions/example/followup", "alice", "then-1", `{"text":"And then?"}`)
	var queued struct{ Events string }
	_ = json.NewDecoder(resp.Body).Decode(&queued)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, queued.Events)
	fmt.Println(readTurn(call("GET", queued.Events, "alice", "", "")))
	// Output:
	// 401 sign in through the gateway first
	// completed: Hello from the mounted ingress.
	// 202 /agent/sessions/example/turns/then-1/events
	// completed: And the follow-up.
}

// readTurn reads a turn's server-sent events (each "data: <event JSON>")
// and returns its terminal event's type with the text streamed before it.
func readTurn(resp *http.Response) string {
	defer resp.Body.Close()
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct{ Type, Delta, Details string }
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return "bad event: " + data
		}
		switch ev.Type {
		case "text":
			text.WriteString(ev.Delta)
		case "retrying":
			text.Reset()
		case "completed":
			return "completed: " + text.String()
		case "failed":
			return "failed: " + ev.Details
		}
	}
	return fmt.Sprintf("%d, no terminal event", resp.StatusCode)
}

// temporalWithWorker makes an agent folder answered by a scripted model
// (answers, in turn), starts a Temporal dev server with a worker serving
// the agent (fastagent.Start with the worker role alone), and returns a
// client of the program's own to that server. In production the worker
// runs elsewhere (`fastagent worker`) and the client is the one your
// program already has.
func temporalWithWorker(answers ...string) (dir string, c client.Client, done func()) {
	dir, err := os.MkdirTemp("", "fastagent-ingress-example-")
	if err != nil {
		panic(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "persona.md"), []byte("You greet people.\n"), 0o600); err != nil {
		panic(err)
	}
	ms := modelserver.New()
	for _, a := range answers {
		ms.Enqueue(modelserver.Reply{Text: strings.SplitAfter(a, " ")})
	}
	vars := map[string]string{"FASTAGENT_MODEL": "openai/scripted", "OPENAI_BASE_URL": ms.URL(), "OPENAI_API_KEY": "example-key"}
	getenv := func(k string) string {
		if v, ok := vars[k]; ok {
			return v
		}
		return os.Getenv(k)
	}
	rt, err := fastagent.Start(context.Background(), fastagent.Options{
		Dir:      dir,
		Temporal: fastagent.Temporal{Embedded: true, UIPort: -1},
		Roles:    fastagent.Roles{Worker: true},
		Getenv:   getenv,
	})
	if err != nil {
		panic(err)
	}
	key, err := os.ReadFile(filepath.Join(dir, ".fastagent", "temporal-token"))
	if err != nil {
		panic(err)
	}
	c, err = client.Dial(client.Options{
		HostPort:          rt.TemporalAddress(),
		Credentials:       client.NewAPIKeyStaticCredentials(strings.TrimSpace(string(key))),
		ConnectionOptions: client.ConnectionOptions{TLSDisabled: true},
	})
	if err != nil {
		panic(err)
	}
	return dir, c, func() {
		c.Close()
		rt.Close()
		ms.Close()
		_ = os.RemoveAll(dir)
	}
}
