package feishu

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Headers of a signed event request.
const (
	HeaderTimestamp = "X-Lark-Request-Timestamp"
	HeaderNonce     = "X-Lark-Request-Nonce"
	HeaderSignature = "X-Lark-Signature"
)

// MaxSkew is how far a request's timestamp may be from now.
const MaxSkew = 5 * time.Minute

// Signature is the platform's event signature: hex SHA-256 over timestamp,
// nonce, Encrypt Key and the raw body, concatenated.
func Signature(timestamp, nonce, key string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(timestamp))
	h.Write([]byte(nonce))
	h.Write([]byte(key))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// Sign returns the headers the platform sends with body at time at. Tests
// and local tools use it to sign fixtures exactly as the platform does.
func Sign(key string, at time.Time, nonce string, body []byte) http.Header {
	ts := strconv.FormatInt(at.Unix(), 10)
	h := http.Header{}
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderNonce, nonce)
	h.Set(HeaderSignature, Signature(ts, nonce, key, body))
	h.Set("Content-Type", "application/json; charset=utf-8")
	return h
}

// Encrypt encrypts plaintext as the platform does: AES-256-CBC with key
// SHA-256(encryptKey), a random IV prefixed, PKCS#7 padding, base64.
func Encrypt(encryptKey string, plaintext []byte) (string, error) {
	k := sha256.Sum256([]byte(encryptKey))
	block, err := aes.NewCipher(k[:])
	if err != nil {
		return "", fmt.Errorf("feishu: encrypt: %w", err)
	}
	pad := aes.BlockSize - len(plaintext)%aes.BlockSize
	buf := make([]byte, aes.BlockSize+len(plaintext)+pad)
	if _, err := rand.Read(buf[:aes.BlockSize]); err != nil {
		return "", fmt.Errorf("feishu: encrypt: %w", err)
	}
	copy(buf[aes.BlockSize:], plaintext)
	for i := len(buf) - pad; i < len(buf); i++ {
		buf[i] = byte(pad)
	}
	cipher.NewCBCEncrypter(block, buf[:aes.BlockSize]).CryptBlocks(buf[aes.BlockSize:], buf[aes.BlockSize:])
	return base64.StdEncoding.EncodeToString(buf), nil
}

// Decrypt reverses Encrypt, checking the padding strictly (the SDK's own
// decrypt trims to the outermost braces instead).
func Decrypt(encryptKey, encrypted string) ([]byte, error) {
	buf, err := base64.StdEncoding.DecodeString(encrypted)
	if err != nil {
		return nil, fmt.Errorf("feishu: decrypt: %w", err)
	}
	if len(buf) < 2*aes.BlockSize || len(buf)%aes.BlockSize != 0 {
		return nil, errors.New("feishu: decrypt: ciphertext is not whole blocks after an IV")
	}
	k := sha256.Sum256([]byte(encryptKey))
	block, err := aes.NewCipher(k[:])
	if err != nil {
		return nil, fmt.Errorf("feishu: decrypt: %w", err)
	}
	out := make([]byte, len(buf)-aes.BlockSize)
	cipher.NewCBCDecrypter(block, buf[:aes.BlockSize]).CryptBlocks(out, buf[aes.BlockSize:])
	pad := int(out[len(out)-1])
	if pad == 0 || pad > aes.BlockSize || !bytes.Equal(out[len(out)-pad:], bytes.Repeat([]byte{byte(pad)}, pad)) {
		return nil, errors.New("feishu: decrypt: bad padding (wrong encrypt key?)")
	}
	// A wrong key yields valid-looking padding about once in 256 tries;
	// the platform only ever encrypts JSON.
	if !json.Valid(out[:len(out)-pad]) {
		return nil, errors.New("feishu: decrypt: the plaintext is not JSON (wrong encrypt key?)")
	}
	return out[:len(out)-pad], nil
}

// checkSignature verifies a request's signature headers over body and its
// timestamp window.
func checkSignature(h http.Header, key string, body []byte, now time.Time) error {
	ts, nonce, sig := h.Get(HeaderTimestamp), h.Get(HeaderNonce), h.Get(HeaderSignature)
	if ts == "" || sig == "" {
		return errors.New("unsigned request")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("bad timestamp %q", ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > MaxSkew || d < -MaxSkew {
		return fmt.Errorf("timestamp %s is outside the %s window", ts, MaxSkew)
	}
	want := Signature(ts, nonce, key, body)
	if subtle.ConstantTimeCompare([]byte(want), []byte(sig)) != 1 {
		return errors.New("signature mismatch")
	}
	return nil
}

// tokenEqual compares a request's verification token with ours in
// constant time (over digests, so the length does not leak either). An
// empty configured token never matches.
func tokenEqual(got, want string) bool {
	if want == "" {
		return false
	}
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}
