package uigate

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// upstream is a stand-in UI server: it records the Authorization it got
// and answers settings like the UI server does.
func upstream(t *testing.T, auth *string) *url.URL {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*auth = r.Header.Get("Authorization")
		if r.URL.Path == SettingsPath {
			_, _ = io.WriteString(w, `{"DefaultNamespace":"default","Codec":{"Endpoint":"","PassAccessToken":false}}`)
			return
		}
		_, _ = io.WriteString(w, "page")
	}))
	t.Cleanup(s.Close)
	u, _ := url.Parse(s.URL)
	return u
}

func newGate(t *testing.T, key string, auth *string) *httptest.Server {
	t.Helper()
	g, err := New(Config{Key: key, Upstream: upstream(t, auth), Port: 8233, Home: "/home", CodecEndpoint: "http://127.0.0.1:8787/codec/dev/k"})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(g)
	t.Cleanup(s.Close)
	return s
}

var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func TestLoginCodes(t *testing.T) {
	var auth string
	s := newGate(t, "key-1", &auth)
	good, err := LoginURL(s.URL, "key-1")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := LoginURL(s.URL, "key-2") // another run's key
	tampered := good[:len(good)-1] + map[bool]string{true: "0", false: "1"}[strings.HasSuffix(good, "1")]
	for name, tc := range map[string]struct {
		link string
		want int
	}{
		"another run's link": {other, http.StatusUnauthorized},
		"tampered":           {tampered, http.StatusUnauthorized},
		"no code":            {s.URL + LoginPath, http.StatusUnauthorized},
		"garbage":            {s.URL + LoginPath + "?code=zz", http.StatusUnauthorized},
	} {
		resp, err := noFollow.Get(tc.link)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want || len(resp.Cookies()) != 0 {
			t.Errorf("%s: %d with %d cookies", name, resp.StatusCode, len(resp.Cookies()))
		}
	}
	resp, err := noFollow.Get(good)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/home" || len(resp.Cookies()) != 1 {
		t.Fatalf("good link: %d → %q, cookies %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	c := resp.Cookies()[0]
	if c.Name != CookieName(8233) || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Value == "key-1" {
		t.Errorf("cookie %+v", c)
	}

	// Signed in: proxied with the key; the settings carry the codec endpoint.
	req, _ := http.NewRequest(http.MethodGet, s.URL+SettingsPath, nil)
	req.AddCookie(c)
	req.Header.Set("Authorization", "Bearer forged")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var settings struct {
		DefaultNamespace string
		Codec            map[string]any
	}
	if err := json.Unmarshal(body, &settings); err != nil || settings.Codec["Endpoint"] != "http://127.0.0.1:8787/codec/dev/k" ||
		settings.Codec["PassAccessToken"] != false || settings.DefaultNamespace != "default" {
		t.Errorf("settings %s (%v)", body, err)
	}
	if auth != "Bearer key-1" {
		t.Errorf("upstream got Authorization %q", auth)
	}

	// A cookie of another run (or none) is refused before the upstream.
	auth = ""
	req, _ = http.NewRequest(http.MethodGet, s.URL+"/anything", nil)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: strings.Repeat("0", len(c.Value))})
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || auth != "" {
		t.Errorf("forged cookie: %d, upstream saw %q", resp.StatusCode, auth)
	}
}

func TestWithCodecKeepsTheRest(t *testing.T) {
	out, err := withCodec([]byte(`{"A":1,"Codec":null,"B":{"C":"d"}}`), "e")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	if m["A"] != float64(1) || m["B"].(map[string]any)["C"] != "d" || m["Codec"].(map[string]any)["Endpoint"] != "e" {
		t.Errorf("%s", out)
	}
}
