package agentside

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/opsgate/opsgate/internal/jose"
)

// LoadAgentKeys returns the agent's long-term key kept in the file path
// (a PKCS #8 PEM, which it writes, readable by the user only, when there
// is none: created is then true), for clientID. The same file gives the
// same key and kid on every run, so that a website that cached the
// agent's key set never has to load it again: an agent that keeps its
// client_id keeps its keys. Its kid is the key's RFC 7638 thumbprint.
func LoadAgentKeys(clientID, path string) (k *AgentKeys, created bool, err error) {
	raw, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		key, err := newSigner("ES256")
		if err != nil {
			return nil, false, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, false, fmt.Errorf("agentside: key file: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, false, fmt.Errorf("agentside: key file: %w", err)
		}
		// O_EXCL: two runs at once never write two keys.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return LoadAgentKeys(clientID, path)
		}
		if err != nil {
			return nil, false, fmt.Errorf("agentside: key file: %w", err)
		}
		if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
			f.Close()
			return nil, false, fmt.Errorf("agentside: key file %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return nil, false, fmt.Errorf("agentside: key file %s: %w", path, err)
		}
		k, err := keysOf(clientID, key)
		return k, true, err
	case err != nil:
		return nil, false, fmt.Errorf("agentside: key file: %w", err)
	}
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, false, fmt.Errorf("agentside: key file %s: not a PKCS #8 PEM private key", path)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, false, fmt.Errorf("agentside: key file %s: %w", path, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, false, fmt.Errorf("agentside: key file %s: a %T can't sign", path, key)
	}
	k, err = keysOf(clientID, signer)
	return k, false, err
}

// keysOf is the AgentKeys of key, with its thumbprint as kid.
func keysOf(clientID string, key crypto.Signer) (*AgentKeys, error) {
	var alg string
	switch k := key.Public().(type) {
	case *ecdsa.PublicKey:
		switch k.Curve.Params().BitSize {
		case 256:
			alg = "ES256"
		case 384:
			alg = "ES384"
		}
	case ed25519.PublicKey:
		alg = "EdDSA"
	}
	if alg == "" {
		return nil, fmt.Errorf("agentside: a %T key is not an agent key (ES256, ES384 or EdDSA)", key.Public())
	}
	kid, err := Thumbprint(key.Public())
	if err != nil {
		return nil, err
	}
	return &AgentKeys{ClientID: clientID, alg: alg, key: key, kid: kid}, nil
}

// Thumbprint is the RFC 7638 JWK thumbprint of a public key (SHA-256,
// base64url): a kid that stays the same for the same key.
func Thumbprint(pub crypto.PublicKey) (string, error) {
	j, err := jose.NewJWK(pub, "", "")
	if err != nil {
		return "", err
	}
	// The required members only, in lexicographic order (RFC 7638 §3.2).
	var members any
	switch j.Kty {
	case "EC":
		members = struct {
			Crv string `json:"crv"`
			Kty string `json:"kty"`
			X   string `json:"x"`
			Y   string `json:"y"`
		}{j.Crv, j.Kty, j.X, j.Y}
	case "OKP":
		members = struct {
			Crv string `json:"crv"`
			Kty string `json:"kty"`
			X   string `json:"x"`
		}{j.Crv, j.Kty, j.X}
	case "RSA":
		members = struct {
			E   string `json:"e"`
			Kty string `json:"kty"`
			N   string `json:"n"`
		}{j.E, j.Kty, j.N}
	}
	b, err := json.Marshal(members)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return jose.B64.EncodeToString(sum[:]), nil
}
