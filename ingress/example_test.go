package ingress_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/ingress"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/worker"
)

// The ingress mounted under /agent/ in a plain net/http server, behind the
// program's own authentication (here a header its gateway sets), beside
// the agent's worker in the same program, both on the program's own
// Temporal client. A request without the header is refused; alice's turn
// streams as server-sent events; the events route of her follow-up carries
// the /agent prefix, and following it streams that turn.
func Example() {
	dir, env, done := exampleAgent("",
		modelserver.Reply{Text: []string{"Hello from ", "the mounted ingress."}},
		modelserver.Reply{Text: []string{"And the ", "follow-up."}})
	defer done()
	c, err := client.Dial(temporalOptions()) // HostPort, Namespace, Credentials
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()
	// The agent's worker: fastagent's plugin (package worker); in
	// production it often runs elsewhere (`fastagent worker`).
	ctx, stopWorker := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() {
		ran <- worker.Run(ctx, c, worker.Options{Dir: dir, Getenv: env, TaskQueue: "mounted-agent", Logger: quiet})
	}()
	defer func() { stopWorker(); <-ran }()

	fromGateway := ingress.PrincipalsFunc(func(r *http.Request) (ingress.Principal, error) {
		user := r.Header.Get("X-Gateway-User")
		if user == "" {
			return ingress.Principal{}, errors.New("sign in through the gateway first")
		}
		return ingress.Principal{Name: user, Rights: []ingress.Right{ingress.RightInvoke, ingress.RightControl}}, nil
	})
	h, err := ingress.New(c, ingress.Options{Dir: dir, TaskQueue: "mounted-agent", Principals: fromGateway, Logger: quiet})
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
