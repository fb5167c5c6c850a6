package webhook

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/egress"
	"github.com/fastagent/fastagent/internal/wire"
)

// receiver is a callback receiver on loopback that counts what reaches it.
type receiver struct {
	srv *httptest.Server
	n   atomic.Int32
}

func newReceiver(t *testing.T, h http.HandlerFunc) *receiver {
	t.Helper()
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.n.Add(1)
		if h != nil {
			h(w, req)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// replyFile is an endpoint file whose answers go to u, with extra reply
// fields.
func replyFile(u, extra string) string {
	return "scheme: token\nsecretEnv: T\nreply:\n  url: " + u + "\n  secretEnv: R\n" + extra
}

var replyEnv = map[string]string{"T": "tok", "R": specSecret}

// send builds endpoint "cb" from file and sends one answer through its
// replier; err is the load error or the send's.
func send(t *testing.T, file string) error {
	t.Helper()
	ch, err := New("cb", []byte(file), env(replyEnv))
	if err != nil {
		return err
	}
	rd, err := ch.Replier.Render(context.Background(), wire.Target{Chat: "hook:cb", Message: "hook:cb:k1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	return rd.Finish(context.Background(), "the answer")
}

// withHost is u with its host name replaced by host (the port kept).
func withHost(t *testing.T, u, host string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.Host = host + ":" + p.Port()
	return p.String()
}

// A callback never reaches loopback, link-local or private addresses
// unless the file opts in, and never follows a redirect: a literal
// address is refused when the file loads (naming the field to set), a name
// when it resolves to such an address, checked on the address dialed (so a
// name that changes its answer cannot slip through), and a redirect is
// refused whatever its target. Nothing reaches the receivers.
func TestCallbackTargetsRefused(t *testing.T) {
	t.Parallel()
	inner := newReceiver(t, nil)
	for name, c := range map[string]struct {
		file     string
		loadErr  string
		sendErr  string
		reaching *receiver
	}{
		"127.0.0.1":                     {file: replyFile(inner.srv.URL, ""), loadErr: "allowPrivate", reaching: inner},
		"a private address":             {file: replyFile("http://10.1.2.3:8080/cb", ""), loadErr: "allowPrivate"},
		"IPv6 loopback":                 {file: replyFile("http://[::1]:9/cb", ""), loadErr: "allowPrivate"},
		"IPv4-mapped loopback":          {file: replyFile("http://[::ffff:127.0.0.1]:9/cb", ""), loadErr: "allowPrivate"},
		"unspecified (this host)":       {file: replyFile("http://0.0.0.0:9/cb", "  allowPrivate: true\n"), loadErr: "reserved"},
		"cloud metadata":                {file: replyFile("http://169.254.169.254/latest/meta-data/", ""), loadErr: "link-local"},
		"cloud metadata, even opted in": {file: replyFile("http://169.254.169.254/latest/meta-data/", "  allowPrivate: true\n"), loadErr: "link-local"},
		"a name resolving to loopback":  {file: replyFile(withHost(t, inner.srv.URL, "localhost"), ""), sendErr: "loopback", reaching: inner},
	} {
		err := send(t, c.file)
		switch {
		case c.loadErr != "" && (err == nil || !strings.Contains(err.Error(), "reply.url") || !strings.Contains(err.Error(), c.loadErr)):
			t.Errorf("%s: %v; want a load error naming reply.url and %q", name, err, c.loadErr)
		case c.sendErr != "" && (err == nil || !strings.Contains(err.Error(), c.sendErr) || !channels.IsPermanent(err)):
			t.Errorf("%s: sent with %v; want a permanent refusal saying %q", name, err, c.sendErr)
		}
	}
	if n := inner.n.Load(); n != 0 {
		t.Errorf("%d callbacks reached a loopback receiver", n)
	}

	// A 302 to loopback: from a receiver that is itself refused (a name
	// resolving to loopback), and from one the file allows.
	for name, opt := range map[string]string{"not opted in": "", "opted in": "  allowPrivate: true\n"} {
		target := newReceiver(t, nil)
		hop := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.srv.URL+"/stolen", http.StatusFound)
		})
		err := send(t, replyFile(withHost(t, hop.srv.URL, "localhost"), opt))
		if err == nil || !channels.IsPermanent(err) {
			t.Errorf("a 302 to loopback, %s: %v; want a permanent refusal", name, err)
		}
		if opt != "" && (err == nil || !strings.Contains(err.Error(), "redirect")) {
			t.Errorf("a 302 to loopback, %s: %v; want it refused as a redirect", name, err)
		}
		if n := target.n.Load(); n != 0 {
			t.Errorf("a 302 to loopback, %s: the redirect's target got %d callbacks", name, n)
		}
	}
}

// With reply.allowPrivate a callback reaches a receiver on loopback (or
// the operator's network), signed as always; the deployment's own
// services stay refused, whatever name leads to them.
func TestCallbackAllowPrivate(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, nil)
	ch, err := New("cb", []byte(replyFile(withHost(t, rcv.srv.URL, "localhost"), "  allowPrivate: true\n")), env(replyEnv))
	if err != nil {
		t.Fatal(err)
	}
	rp := ch.Replier.(*Replier)
	finish := func(key string) error {
		rd, err := rp.Render(context.Background(), wire.Target{Chat: "hook:cb", Message: key}, "")
		if err != nil {
			t.Fatal(err)
		}
		return rd.Finish(context.Background(), "the answer")
	}
	if err := finish("hook:cb:k1"); err != nil || rcv.n.Load() != 1 {
		t.Fatalf("opted in: %v, %d callbacks; want one delivered", err, rcv.n.Load())
	}
	u, _ := url.Parse(rcv.srv.URL)
	deny, err := egress.ParseDests(context.Background(), []string{u.Host})
	if err != nil {
		t.Fatal(err)
	}
	rp.SetControlPlane(deny)
	if err := finish("hook:cb:k2"); err == nil || !channels.IsPermanent(err) || !strings.Contains(err.Error(), "own services") {
		t.Errorf("to a control-plane address: %v; want a permanent refusal naming the deployment's own services", err)
	}
	if n := rcv.n.Load(); n != 1 {
		t.Errorf("%d callbacks reached the control-plane address, want none after the first", n-1)
	}
}

// A service of the deployment listening on every address (the ingress with
// http.host 0.0.0.0, which the control plane names as 127.0.0.1:<port>) is
// refused on every address of this machine, not only the one named: with
// reply.allowPrivate a callback to another loopback address, or to IPv6
// loopback, at its port reaches it just the same.
func TestCallbackControlPlaneOnEveryOwnAddress(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	ln, err := net.Listen("tcp", ":0") // every address, as the ingress on 0.0.0.0
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	deny, err := egress.ParseDests(context.Background(), []string{net.JoinHostPort("127.0.0.1", port)})
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"127.0.0.2", "[::1]", "localhost"} {
		ch, err := New("cb", []byte(replyFile("http://"+host+":"+port+"/cb", "  allowPrivate: true\n")), env(replyEnv))
		if err != nil {
			t.Fatal(err)
		}
		rp := ch.Replier.(*Replier)
		rp.SetControlPlane(deny)
		rd, err := rp.Render(context.Background(), wire.Target{Chat: "hook:cb", Message: "hook:cb:k1"}, "")
		if err != nil {
			t.Fatal(err)
		}
		err = rd.Finish(context.Background(), "the answer")
		if err == nil || !channels.IsPermanent(err) || !strings.Contains(err.Error(), "own services") {
			t.Errorf("to %s:%s: %v; want a permanent refusal naming the deployment's own services", host, port, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d callbacks reached the deployment's own service", n)
	}
}
