package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

const (
	ctxTenant   = "edgepipe.tenant"
	ctxOperator = "edgepipe.operator"
)

// tokenIndex finds the tenant of a presented token by its SHA-256, so a
// lookup's timing says nothing about how much of a token was right.
type tokenIndex map[[32]byte]string

func newTokenIndex(tokens map[string]string) tokenIndex {
	idx := make(tokenIndex, len(tokens))
	for tok, tenant := range tokens {
		idx[sha256.Sum256([]byte(tok))] = tenant
	}
	return idx
}

func (idx tokenIndex) lookup(tok string) (string, bool) {
	if tok == "" {
		return "", false
	}
	t, ok := idx[sha256.Sum256([]byte(tok))]
	return t, ok
}

// bearer extracts the token of "Authorization: Bearer <token>".
func bearer(r *http.Request) string {
	h := r.Header.Get(echo.HeaderAuthorization)
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

func unauthorized(detail string) *Problem {
	return problem(http.StatusUnauthorized, "unauthorized", detail).
		withHeader(echo.HeaderWWWAuthenticate, `Bearer realm="edgepipe"`)
}

// requireTenant authenticates a tenant's bearer token.
func (s *Server) requireTenant(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		tenant, ok := s.tokens.lookup(bearer(c.Request()))
		if !ok {
			return unauthorized("send Authorization: Bearer <token> with a valid token")
		}
		c.Set(ctxTenant, tenant)
		return next(c)
	}
}

func tenantOf(c echo.Context) string { t, _ := c.Get(ctxTenant).(string); return t }

// requireAdmin authenticates the operator: Authorization: Bearer <admin
// token>, or HTTP Basic with the admin token as password (the user name, if
// any, is recorded as the operator). Form posts must also carry the page's
// CSRF token, because a browser sends Basic credentials along with a
// cross-site form.
func (s *Server) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if len(s.adminHash) == 0 {
			return problem(http.StatusForbidden, "admin_disabled",
				"the operator API is disabled: set EDGEPIPE_ADMIN_TOKEN to enable it")
		}
		r := c.Request()
		operator := "admin"
		presented := bearer(r)
		if presented == "" {
			if user, pass, ok := r.BasicAuth(); ok {
				presented = pass
				if u := strings.TrimSpace(user); u != "" && len(u) <= 64 && printable(u) {
					operator = u
				}
			}
		}
		h := sha256.Sum256([]byte(presented))
		if presented == "" || subtle.ConstantTimeCompare(h[:], s.adminHash) != 1 {
			return problem(http.StatusUnauthorized, "unauthorized", "operator credentials required").
				withHeader(echo.HeaderWWWAuthenticate, `Basic realm="edgepipe operations", charset="UTF-8"`).
				withHeader(echo.HeaderWWWAuthenticate, `Bearer realm="edgepipe operations"`)
		}
		if isForm(r) && !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) {
			return problem(http.StatusForbidden, "csrf_failed", "the form is stale or was not sent by the operations page; reload it")
		}
		c.Set(ctxOperator, operator)
		return next(c)
	}
}

func operatorOf(c echo.Context) string { o, _ := c.Get(ctxOperator).(string); return o }

// csrfToken derives the operations page's form token from the admin token:
// stable across restarts and replicas, unknowable without the admin token.
func csrfToken(adminToken string) string {
	m := hmac.New(sha256.New, []byte(adminToken))
	m.Write([]byte("edgepipe admin form v1"))
	return hex.EncodeToString(m.Sum(nil))
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
