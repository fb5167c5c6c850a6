package ingress

import (
	"crypto/subtle"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"
)

// codecAllowHeaders are the request headers the Temporal Web UI and CLI send
// to a codec server.
const codecAllowHeaders = "Authorization, Content-Type, X-Namespace"

// MaxCodecBody bounds a codec request (a page of history's payloads).
const MaxCodecBody = 16 << 20

// codecRoutes mounts Temporal's remote codec protocol (POST /codec/encode,
// /codec/decode) when s.Codec is set: CORS for the Web UI's origins
// (CodecOrigins), a bearer token with the codec right, as every API route.
func (s *Server) codecRoutes(r *gin.Engine) {
	if s.Codec == nil {
		return
	}
	h := gin.WrapH(s.Codec)
	for _, op := range []string{"/codec/encode", "/codec/decode"} {
		r.OPTIONS(op, s.codecCORS)
		r.POST(op, s.codecCORS, s.codecGuard, h)
	}
	if s.DevCodecKey == "" {
		return
	}
	// The dev UI's endpoint: the codec handler sees the protocol's own path.
	dev := gin.WrapH(http.StripPrefix("/codec/dev/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, op, _ := strings.Cut(r.URL.Path, "/")
		r.URL.Path = "/codec/" + op
		s.Codec.ServeHTTP(w, r)
	})))
	for _, op := range []string{"/codec/dev/:key/encode", "/codec/dev/:key/decode"} {
		r.OPTIONS(op, s.codecCORS)
		r.POST(op, s.codecCORS, s.codecGuard, dev)
	}
}

// codecOrigin reports whether origin may call the codec from a browser.
func (s *Server) codecOrigin(origin string) bool {
	o := strings.TrimRight(origin, "/")
	return slices.Contains(s.CodecOrigins, o) || slices.Contains(s.AllowedOrigins, o) ||
		(s.DevUIOrigin != "" && o == s.DevUIOrigin)
}

// codecCORS answers the browser's preflight and adds the CORS headers for an
// allowed origin; a request from another origin gets none (and the guard
// refuses it).
func (s *Server) codecCORS(c *gin.Context) {
	origin := c.GetHeader("Origin")
	if origin != "" && s.codecOrigin(origin) {
		h := c.Writer.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Credentials", "true")
		h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
		h.Set("Access-Control-Allow-Headers", codecAllowHeaders)
		h.Set("Access-Control-Max-Age", "600")
		h.Add("Vary", "Origin")
	}
	if c.Request.Method == http.MethodOptions {
		c.AbortWithStatus(http.StatusNoContent)
	}
}

// codecGuard is guard for the codec routes: the Web UI's origins are
// allowed besides AllowedOrigins, and the right needed is RightCodec. On
// the dev UI's routes (/codec/dev/<key>/…) the path's key, compared in
// constant time with DevCodecKey, stands for the token.
func (s *Server) codecGuard(c *gin.Context) {
	if !s.hostAllowed(c.Request.Host) {
		abort(c, CodeMisdirected, fmt.Sprintf("this server does not answer for host %q (configure http.allowedHosts)", c.Request.Host))
		return
	}
	origin := c.GetHeader("Origin")
	if origin != "" && !s.codecOrigin(origin) {
		abort(c, CodeForbiddenOrigin, fmt.Sprintf("codec requests from origin %q are not allowed (set FASTAGENT_CODEC_ORIGINS)", origin))
		return
	}
	if mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type")); err != nil || mt != "application/json" {
		abort(c, CodeUnsupportedMedia, "a codec request must be sent with Content-Type: application/json")
		return
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, MaxCodecBody)
	if key := c.Param("key"); key != "" {
		if s.DevCodecKey == "" || subtle.ConstantTimeCompare([]byte(key), []byte(s.DevCodecKey)) != 1 {
			abort(c, CodeUnauthorized, "wrong dev codec key: use the codec endpoint `fastagent dev` printed")
			return
		}
		c.Next()
		return
	}
	p, ok := s.authenticate(c)
	if !ok {
		return
	}
	if !p.Has(RightCodec) {
		abort(c, CodeForbidden, fmt.Sprintf("principal %q lacks the %s right for this route", p.Name, RightCodec))
		return
	}
	c.Next()
}

// CodecHandler serves only the codec routes and GET /health, for a codec
// server on its own (`fastagent codec-server`): the same CORS, Host check
// and tokens (RightCodec) as on the ingress, no other route.
func (s *Server) CodecHandler() http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.Use(gin.Recovery())
	r.GET("/health", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	s.codecRoutes(r)
	r.NoMethod(func(c *gin.Context) { c.String(http.StatusMethodNotAllowed, "method not allowed") })
	r.NoRoute(func(c *gin.Context) { c.String(http.StatusNotFound, "not found") })
	return r
}
