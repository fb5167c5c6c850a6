package github

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	mrand "math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fastagent/fastagent/internal/testsupport/fakegithub"
	"github.com/fastagent/fastagent/internal/wire"
)

func fake(t *testing.T) *fakegithub.Server {
	f := fakegithub.New()
	t.Cleanup(f.Close)
	return f
}

func tokenReplier(t *testing.T, f *fakegithub.Server) *Replier {
	t.Helper()
	r, err := NewReplier(Auth{Token: "ghp_test"}, f.URL)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func target(key string, review bool, installation int64) wire.Target {
	data, _ := json.Marshal(targetData{Review: review, Installation: installation})
	return wire.Target{Chat: "o/r", Thread: "5", Message: key, Data: data}
}

// finish renders key's reply once (continuing ref) and returns its ref.
func finish(t *testing.T, r *Replier, tg wire.Target, ref, text string) string {
	t.Helper()
	rd, err := r.Render(context.Background(), tg, ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := rd.Show(context.Background(), nil); err != nil || rd.Ref() != ref {
		t.Fatalf("show: %v, ref %q", err, rd.Ref())
	}
	if err := rd.Finish(context.Background(), text); err != nil {
		t.Fatal(err)
	}
	return rd.Ref()
}

// A retried reply edits its own comment: through the stored reference, or
// — the reference lost between the post and the store — through the
// marker found among the recent comments (over several pages).
func TestReplyIdempotent(t *testing.T) {
	t.Parallel()
	f := fake(t)
	f.PerPage = 3
	for i := 0; i < 10; i++ {
		f.AddComment("o/r", 5, "someone else")
	}
	r := tokenReplier(t, f)
	tg := target("github:d1:0", false, 0)
	ref := finish(t, r, tg, "", "the answer")
	if !strings.HasPrefix(ref, "comment:") {
		t.Fatalf("ref %q", ref)
	}
	finish(t, r, tg, ref, "the answer")   // retried with the reference
	finish(t, r, tg, "", "the answer")    // reference lost: found by marker
	finish(t, r, tg, "", "the answer v2") // found by marker, edited
	var mine []fakegithub.Comment
	for _, c := range f.Comments("o/r", 5) {
		if strings.Contains(c.Body, "fastagent:turn") {
			mine = append(mine, c)
		}
	}
	if len(mine) != 1 || mine[0].Body != "the answer v2\n\n"+Marker("github:d1:0", 0) || mine[0].Author != "Bearer ghp_test" {
		t.Fatalf("comments %+v, want one with the last text", mine)
	}
	if n := len(f.Calls("comment.create")); n != 1 {
		t.Errorf("%d creates", n)
	}
	// Another turn on the same issue is another comment.
	finish(t, r, target("github:d2:0", false, 0), "", "another answer")
	if n := len(f.Calls("comment.create")); n != 2 {
		t.Errorf("%d creates after a second turn, want 2", n)
	}
}

// A long answer is several comments, each idempotent by its part index.
func TestReplySplit(t *testing.T) {
	t.Parallel()
	f := fake(t)
	r := tokenReplier(t, f)
	r.Limit = 200
	var b strings.Builder
	for i := 0; b.Len() < 700; i++ {
		b.WriteString("line of the long answer é🙂\n")
	}
	text := b.String()
	tg := target("github:long:0", false, 0)
	ref := finish(t, r, tg, "", text)
	first := f.Comments("o/r", 5)
	if len(first) < 4 {
		t.Fatalf("%d comments, want the answer split in 4 or more", len(first))
	}
	var joined strings.Builder
	for i, c := range first {
		body, ok := strings.CutSuffix(c.Body, "\n\n"+Marker("github:long:0", i))
		if !ok || utf16Len(c.Body) > 200 {
			t.Fatalf("comment %d %q: no marker of part %d, or over the limit", i, c.Body, i)
		}
		joined.WriteString(body)
	}
	if joined.String() != text {
		t.Errorf("the parts do not add up to the answer")
	}
	finish(t, r, tg, ref, text)
	finish(t, r, tg, "", text)
	if again := f.Comments("o/r", 5); len(again) != len(first) || len(f.Calls("comment.create")) != len(first) {
		t.Errorf("retries made %d comments (%d creates), want %d", len(again), len(f.Calls("comment.create")), len(first))
	}
}

func TestReplyReview(t *testing.T) {
	t.Parallel()
	f := fake(t)
	r := tokenReplier(t, f)
	tg := target("github:pr:0", true, 0)
	ref := finish(t, r, tg, "", "looks good")
	if !strings.HasPrefix(ref, "review:") {
		t.Fatalf("ref %q", ref)
	}
	finish(t, r, tg, ref, "looks good, really")
	finish(t, r, tg, "", "looks good, really")
	cs := f.Comments("o/r", 5)
	if len(cs) != 1 || !cs[0].Review || cs[0].Event != "COMMENT" || !strings.HasPrefix(cs[0].Body, "looks good, really\n\n") {
		t.Fatalf("reviews %+v", cs)
	}
	if n := len(f.Calls("review.update")); n != 1 {
		t.Errorf("%d review updates, want 1 (the marker search found it unchanged)", n)
	}
}

// As a GitHub App, replies use the event's installation token, minted once
// and cached.
func TestReplyAsApp(t *testing.T) {
	t.Parallel()
	f := fake(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	ch, err := New([]byte("rules: [{event: issues}]"), func(k string) string {
		return map[string]string{"GITHUB_WEBHOOK_SECRET": "s", "GITHUB_APP_ID": "123", "GITHUB_APP_PRIVATE_KEY": string(pemKey), APIURLEnv: f.URL}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	r := ch.Replier.(*Replier)
	finish(t, r, target("github:a:0", false, 2311213), "", "one")
	finish(t, r, target("github:b:0", false, 2311213), "", "two")
	toks := f.Calls("app.token")
	if len(toks) != 1 || toks[0].Path != "/app/installations/2311213/access_tokens" || !strings.HasPrefix(toks[0].Auth, "Bearer ") {
		t.Fatalf("token calls %+v", toks)
	}
	for _, c := range f.Comments("o/r", 5) {
		if c.Author != "token "+f.Token {
			t.Errorf("comment posted with %q, want the installation token", c.Author)
		}
	}
	if _, err := r.Render(context.Background(), target("github:c:0", false, 0), ""); err == nil {
		t.Error("an App reply without an installation was accepted")
	}
}

func TestRenderRefusesBadTargets(t *testing.T) {
	t.Parallel()
	r := tokenReplier(t, fake(t))
	for _, c := range []struct {
		tg  wire.Target
		ref string
	}{
		{wire.Target{Chat: "o", Thread: "5", Message: "k"}, ""},
		{wire.Target{Chat: "o/r", Thread: "x", Message: "k"}, ""},
		{wire.Target{Chat: "o/r", Thread: "5"}, ""},
		{wire.Target{Chat: "o/r", Thread: "5", Message: "k"}, "message:12"},
	} {
		if _, err := r.Render(context.Background(), c.tg, c.ref); err == nil {
			t.Errorf("target %+v ref %q accepted", c.tg, c.ref)
		}
	}
}

func TestSplit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		text  string
		limit int
		want  []string
	}{
		{"", 20, []string{""}},
		{"short", 20, []string{"short"}},
		{"aaaaaaaaaaaaaaaaaaaaaaaaa", 20, []string{"aaaaaaaaaaaaaaaaaaaa", "aaaaa"}},
		{"aaaaaaaaaaaaaaaaa\nbbbbbbbbbb", 20, []string{"aaaaaaaaaaaaaaaaa\n", "bbbbbbbbbb"}},
		{"🙂🙂🙂🙂🙂🙂🙂🙂🙂🙂🙂", 20, []string{"🙂🙂🙂🙂🙂🙂🙂🙂🙂🙂", "🙂"}},
	}
	for _, c := range cases {
		got := Split(c.text, c.limit)
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("Split(%q, %d) = %q, want %q", c.text, c.limit, got, c.want)
		}
	}
	// Property: over random texts the parts are valid, within the limit
	// and add up to the text.
	rng := mrand.New(mrand.NewPCG(1, 2))
	alphabet := []rune("ab c\n\té🙂漢")
	for i := 0; i < 500; i++ {
		rs := make([]rune, rng.IntN(400))
		for j := range rs {
			rs[j] = alphabet[rng.IntN(len(alphabet))]
		}
		text, limit := string(rs), 16+rng.IntN(60)
		parts := Split(text, limit)
		if strings.Join(parts, "") != text {
			t.Fatalf("parts of %q do not add up", text)
		}
		for _, p := range parts {
			if utf16Len(p) > limit || !utf8.ValidString(p) || (p == "" && text != "") {
				t.Fatalf("part %q of %q (limit %d)", p, text, limit)
			}
		}
	}
}
