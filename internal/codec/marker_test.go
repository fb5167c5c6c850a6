package codec

import (
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
)

// OnClient tells a client made with the codec's Marker from one made
// without it, or with another key's, without reaching any server.
func TestOnClient(t *testing.T) {
	c1, err := New([]Key{{ID: "k1", Key: make([]byte, 32)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := New([]Key{{ID: "k2", Key: make([]byte, 32)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	lazy := func(o client.Options) client.Client {
		o.HostPort = "127.0.0.1:1" // nothing listens: the probe makes no call
		cl, err := client.NewLazyClient(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	if !c1.OnClient(lazy(client.Options{DataConverter: c1.DataConverter(), Interceptors: []interceptor.ClientInterceptor{c1.Marker()}})) {
		t.Error("a client with the marker: not recognised")
	}
	if c1.OnClient(lazy(client.Options{})) {
		t.Error("a plain client passed as encoding")
	}
	if c1.OnClient(lazy(client.Options{Interceptors: []interceptor.ClientInterceptor{c2.Marker()}})) {
		t.Error("a client of another key passed")
	}
	if c1.OnClient(nil) {
		t.Error("nil passed")
	}
	type broken struct{ client.Client }
	if c1.OnClient(broken{}) {
		t.Error("a client that panics passed")
	}
}
