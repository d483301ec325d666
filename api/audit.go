package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/buildrisk/radar/queries"
)

// Audit actions: what an audit_event records.
const (
	AuditRequest      = "request"
	AuditStop         = "stop"
	AuditAbandon      = "abandon"
	AuditLogin        = "login"
	AuditLoginFailed  = "login_failed"
	AuditLogout       = "logout"
	AuditRiverUIWrite = "riverui_write_refused"
	// AuditTokenRefused is a refused bearer token: the first of its
	// client's AuthFailureWindow only (authFailed), so that a flood adds
	// at most AuthGlobalFailuresMax records a window.
	AuditTokenRefused = "token_refused"
)

// clientKey carries the client's address in a request's context.
type clientKey struct{}

// withClient puts r's client address (clientAddr) in its context, for the
// audit trail, the logs and the limits of failed credential checks.
func (s *Server) withClient(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), clientKey{}, s.clientAddr(r)))
}

func clientFrom(ctx context.Context) string {
	c, _ := ctx.Value(clientKey{}).(string)
	return c
}

// audit appends an event by ctx's caller (actor names it explicitly when
// ctx has none yet: a login). It is written after the action, in a
// statement of its own: a failure is logged, never turned into the
// action's failure.
func (s *Server) audit(ctx context.Context, actor, action, target, detail string) {
	if actor == "" {
		actor = callerName(ctx)
	}
	err := s.queries.AuditEventInsert(ctx, s.pool, &queries.AuditEventInsertParams{
		Actor: actor, Client: clientFrom(ctx), Action: action, Target: target, Detail: detail,
	})
	if err != nil {
		s.cfg.Logger.ErrorContext(ctx, "error writing the audit trail", "action", action, "target", target, "actor", actor, "error", err.Error())
	}
}

// AuditEventView is one event of GET /v1/audit.
type AuditEventView struct {
	ID     string    `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor" doc:"the token's name (ParseTokens), or api when auth is off"`
	Client string    `json:"client" doc:"the client's address"`
	Action string    `json:"action" enum:"request,stop,abandon,login,login_failed,logout,riverui_write_refused,token_refused"`
	Target string    `json:"target" doc:"what was acted on: a job, request or execution id"`
	Detail string    `json:"detail"`
}

type auditListInput struct {
	Limit  string `query:"limit" doc:"page size, 1..500 (default 50)"`
	Cursor string `query:"cursor" doc:"nextCursor of the previous page"`
}

// AuditListOutput is GET /v1/audit.
type AuditListOutput struct {
	Body struct {
		Events     []*AuditEventView `json:"events"`
		NextCursor *string           `json:"nextCursor" doc:"pass as cursor for the next page; null on the last page"`
	}
}

func (s *Server) registerAudit(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "audit-list",
		Method:      http.MethodGet,
		Path:        "/v1/audit",
		Summary:     "The audit trail, newest first (operators only)",
		Description: "Who (token name), when, from where and what: every request, stop, abandon, login, failed login, logout and refused River UI mutation.",
		Tags:        []string{"audit"},
		Security:    []map[string][]string{{"bearer": {}}},
		Errors:      []int{http.StatusBadRequest, http.StatusForbidden},
	}, s.listAudit)
}

func (s *Server) listAudit(ctx context.Context, in *auditListInput) (*AuditListOutput, error) {
	if c, _ := ctx.Value(authenticatedKey{}).(*caller); c != nil && c.role != RoleOperator {
		return nil, huma.Error403Forbidden("the audit trail needs an operator token; this token is " + string(c.role))
	}
	limit := 50
	if in.Limit != "" {
		n, err := strconv.Atoi(in.Limit)
		if err != nil || n < 1 || n > 500 || strconv.Itoa(n) != in.Limit {
			return nil, badInput("audit", "limit", "query.limit", "expected an integer from 1 to 500")
		}
		limit = n
	}
	var cursor int64
	if in.Cursor != "" {
		id, ok := parseID(in.Cursor)
		if !ok {
			return nil, badInput("audit", "cursor", "query.cursor", "expected the nextCursor of a previous page")
		}
		cursor = id
	}
	rows, err := s.queries.AuditEventList(ctx, s.reads, &queries.AuditEventListParams{Cursor: cursor, RowLimit: int32(limit) + 1})
	if err != nil {
		return nil, s.problemFrom(ctx, err)
	}
	out := &AuditListOutput{}
	out.Body.Events = []*AuditEventView{}
	for i, row := range rows {
		if i == limit {
			next := formatID(rows[limit-1].ID)
			out.Body.NextCursor = &next
			break
		}
		out.Body.Events = append(out.Body.Events, &AuditEventView{
			ID: formatID(row.ID), At: row.At, Actor: row.Actor, Client: row.Client, Action: row.Action, Target: row.Target, Detail: row.Detail,
		})
	}
	return out, nil
}
