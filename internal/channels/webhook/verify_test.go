package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The Standard Webhooks specification's published test vectors (the
// reference libraries' shared cases).
const (
	specSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID      = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTS      = 1614265330
	specPayload = `{"test": 2432232314}`
	specSig     = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestStandardSpecSignatureVector(t *testing.T) {
	k, err := DecodeSecret(specSecret)
	if err != nil {
		t.Fatal(err)
	}
	if got := StandardSignature(k, specID, specTS, []byte(specPayload)); got != specSig {
		t.Fatalf("signature %s, want %s", got, specSig)
	}
	// The secret without its prefix is the same key.
	if k2, err := DecodeSecret(strings.TrimPrefix(specSecret, SecretPrefix)); err != nil || string(k2) != string(k) {
		t.Fatalf("unprefixed secret: %v", err)
	}
	for _, bad := range []string{"", "whsec_", "whsec_!!notbase64"} {
		if _, err := NewStandard([]string{bad}, DefaultTolerance); err == nil {
			t.Errorf("secret %q accepted", bad)
		}
	}
}

// The specification's verification cases.
func TestStandardSpecCases(t *testing.T) {
	now := time.Unix(specTS, 0)
	v, err := NewStandard([]string{specSecret}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	base := func(ts time.Time) http.Header {
		h, err := SignStandard([]string{specSecret}, specID, ts, []byte(specPayload))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	cases := []struct {
		name   string
		ts     time.Time
		modify func(h http.Header)
		ok     bool
	}{
		{"valid signature is valid", now, nil, true},
		{"the published signature is valid", now, func(h http.Header) { h.Set(HeaderSignature, specSig) }, true},
		{"missing id", now, func(h http.Header) { h.Del(HeaderID) }, false},
		{"missing timestamp", now, func(h http.Header) { h.Del(HeaderTimestamp) }, false},
		{"missing signature", now, func(h http.Header) { h.Del(HeaderSignature) }, false},
		{"invalid signature", now, func(h http.Header) { h.Set(HeaderSignature, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=") }, false},
		{"partial signature", now, func(h http.Header) { h.Set(HeaderSignature, "v1,") }, false},
		{"old timestamp", now.Add(-5*time.Minute - time.Second), nil, false},
		{"new timestamp", now.Add(5*time.Minute + time.Second), nil, false},
		{"malformed timestamp", now, func(h http.Header) { h.Set(HeaderTimestamp, "soon") }, false},
		{"valid multi sig is valid", now, func(h http.Header) {
			h.Set(HeaderSignature, strings.Join([]string{
				"v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
				"v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
				h.Get(HeaderSignature),
				"v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
			}, " "))
		}, true},
		{"a v1a (asymmetric) signature alone is not accepted", now, func(h http.Header) {
			h.Set(HeaderSignature, "v1a,"+strings.TrimPrefix(h.Get(HeaderSignature), "v1,"))
		}, false},
	}
	for _, c := range cases {
		h := base(c.ts)
		if c.modify != nil {
			c.modify(h)
		}
		id, err := v.Verify(h, []byte(specPayload), now)
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok=%v", c.name, err, c.ok)
		}
		if err == nil && id != specID {
			t.Errorf("%s: id %q", c.name, id)
		}
	}
	// A changed body fails.
	if _, err := v.Verify(base(now), []byte(`{"test": 2432232315}`), now); err == nil {
		t.Error("tampered body accepted")
	}
}

// Two secrets at once: a request signed with either passes (rotation).
func TestStandardRotation(t *testing.T) {
	const other = "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24="
	v, err := NewStandard([]string{other, specSecret}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, s := range []string{specSecret, other} {
		h, _ := SignStandard([]string{s}, "msg_1", now, []byte("{}"))
		if _, err := v.Verify(h, []byte("{}"), now); err != nil {
			t.Errorf("signed with %s: %v", s, err)
		}
	}
	h, _ := SignStandard([]string{"whsec_bm90LW9uZS1vZi10aGVt"}, "msg_1", now, []byte("{}"))
	if _, err := v.Verify(h, []byte("{}"), now); err == nil {
		t.Error("a third secret passed")
	}
}

// stripeHeader builds a Stripe-Signature the way Stripe documents it:
// t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>" keyed by the whole secret>.
func stripeHeader(secret string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "%d.", ts)
	mac.Write(body)
	return fmt.Sprintf("t=%d,v1=%s,v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39", ts, hex.EncodeToString(mac.Sum(nil)))
}

// stripeConfig is the hmac configuration of a Stripe endpoint.
var stripeConfig = HMACConfig{Header: "Stripe-Signature", SignatureKey: "v1", TimestampKey: "t"}

func TestHMACStripe(t *testing.T) {
	const secret = "whsec_stripe_test_secret"
	v, err := NewHMAC(stripeConfig, []string{secret}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"evt_1","type":"payment_intent.succeeded"}`)
	now := time.Unix(1700000000, 0)
	h := http.Header{}
	h.Set("Stripe-Signature", stripeHeader(secret, now.Unix(), body))
	if _, err := v.Verify(h, body, now); err != nil {
		t.Fatalf("valid Stripe signature: %v", err)
	}
	// What Sign makes is what Stripe makes.
	h2 := http.Header{}
	v.Sign(h2, body, "1700000000")
	if got, want := h2.Get("Stripe-Signature"), strings.Split(h.Get("Stripe-Signature"), ",v0=")[0]; got != want {
		t.Errorf("Sign %q, want %q", got, want)
	}
	for _, c := range []struct {
		name string
		h    string
		body []byte
		now  time.Time
	}{
		{"bad signature", stripeHeader("whsec_other", now.Unix(), body), body, now},
		{"stale timestamp", stripeHeader(secret, now.Add(-10*time.Minute).Unix(), body), body, now},
		{"missing header", "", body, now},
		{"no v1", fmt.Sprintf("t=%d", now.Unix()), body, now},
		{"no timestamp", strings.SplitN(stripeHeader(secret, now.Unix(), body), ",", 2)[1], body, now},
		{"tampered body", stripeHeader(secret, now.Unix(), body), append([]byte(" "), body...), now},
	} {
		h := http.Header{}
		if c.h != "" {
			h.Set("Stripe-Signature", c.h)
		}
		if _, err := v.Verify(h, c.body, c.now); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

// A plain X-Signature: sha256=<hex> over the body, and variants.
func TestHMACPlainAndVariants(t *testing.T) {
	body := []byte(`{"event":"build.finished"}`)
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write(body)
	sig := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	v, err := NewHMAC(HMACConfig{Header: "X-Signature", Prefix: "sha256="}, []string{"old", "s3cret"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"X-Signature": {sig}}
	if _, err := v.Verify(h, body, time.Now()); err != nil {
		t.Fatalf("valid: %v", err)
	}
	for name, bad := range map[string]string{
		"no prefix":    strings.TrimPrefix(sig, "sha256="),
		"not hex":      "sha256=zz",
		"wrong secret": "sha256=" + strings.Repeat("ab", 32),
	} {
		if _, err := v.Verify(http.Header{"X-Signature": {bad}}, body, time.Now()); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Every algorithm and encoding round-trips through Sign, with a
	// timestamp header folded in.
	now := time.Now()
	for _, alg := range []string{"sha1", "sha256", "sha512"} {
		for _, enc := range []string{"hex", "base64"} {
			cfg := HMACConfig{Header: "X-Sig", Algorithm: alg, Encoding: enc, TimestampHeader: "X-Timestamp", Signed: "v0:{timestamp}:{body}"}
			v, err := NewHMAC(cfg, []string{"k"}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			h := http.Header{}
			v.Sign(h, body, fmt.Sprint(now.Unix()))
			if _, err := v.Verify(h, body, now); err != nil {
				t.Errorf("%s/%s: %v", alg, enc, err)
			}
			h.Set("X-Timestamp", fmt.Sprint(now.Add(-2*time.Minute).Unix()))
			if _, err := v.Verify(h, body, now); err == nil {
				t.Errorf("%s/%s: stale timestamp accepted", alg, enc)
			}
		}
	}
	for _, bad := range []HMACConfig{
		{},
		{Header: "X", Algorithm: "md5"},
		{Header: "X", Encoding: "base32"},
		{Header: "X", TimestampKey: "t"},
		{Header: "X", Signed: "{timestamp}"},
		{Header: "X", Signed: "{timestamp}.{body}"},
	} {
		if _, err := NewHMAC(bad, []string{"k"}, time.Minute); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
}

// GitLab's X-Gitlab-Token, compared in constant time; Authorization takes
// a bearer token.
func TestToken(t *testing.T) {
	v := &Token{Header: "X-Gitlab-Token", Tokens: []string{"glt-1", "glt-2"}}
	for tok, ok := range map[string]bool{"glt-1": true, "glt-2": true, "glt-3": false, "": false, "glt-1 ": false} {
		h := http.Header{}
		if tok != "" {
			h.Set("X-Gitlab-Token", tok)
		}
		if _, err := v.Verify(h, nil, time.Now()); (err == nil) != ok {
			t.Errorf("token %q: %v, want ok=%v", tok, err, ok)
		}
	}
	a := &Token{Header: "Authorization", Tokens: []string{"t0k"}}
	if _, err := a.Verify(http.Header{"Authorization": {"Bearer t0k"}}, nil, time.Now()); err != nil {
		t.Errorf("bearer: %v", err)
	}
}
