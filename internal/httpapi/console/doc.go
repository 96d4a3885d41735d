// Package console is the operator console of outboxd: a few HTML pages
// served at /ui/ by every role that has the HTTP surface, a face on the
// JSON of /v1/status and the admin API (/v1/admin/) and nothing more. It
// holds no state and talks to no backend: every figure on a page and every
// action goes through the same API the operator commands call, so the
// console can do nothing the API does not allow.
//
// It lives under httpapi because it is part of the HTTP surface: httpapi
// mounts it in its route table, next to the API it calls, and decides
// whether a role serves it. It is a package of its own so that its
// templates and assets (embedded with go:embed) and its handler stay apart
// from the API's handlers, and so that it cannot reach the API's
// internals: it imports nothing of outboxd.
//
// # Pages and data
//
// The pages are rendered on the server with html/template: the layout,
// navigation, headings, labelled forms and table heads, and, unless the
// instance is read-only, the action buttons. They carry no data: a browser
// navigation cannot send the Authorization header, so the figures cannot
// come with the page without a cookie or a token in the URL, both of which
// this package refuses (a cookie is sent by every tab and to every page of
// the origin; a URL is logged and kept in the history). Instead a little
// JavaScript (assets/*.js, no build step) fetches the JSON of the API with
// the header and fills the page in, with DOM text nodes only (never HTML
// built from data). The pages themselves are served without the token:
// they hold nothing but the instance's role and whether it is read-only.
//
// The bearer token is entered once per tab, when the API first asks for it,
// and kept in the tab's sessionStorage: it outlives a reload and a
// navigation within the tab, is not shared with other tabs (beyond a tab
// opened from this one, which gets a copy), and is gone when the tab
// closes. "Forget token" removes it. A Content-Security-Policy allows
// scripts, styles and requests of the console's own origin only.
//
// # Read-only
//
// With Config.ReadOnly the pages have no action button at all (they are
// left out of the HTML, not hidden); the API refuses the same actions with
// 403 (httpapi.Config.ReadOnly), so the flag holds for every client.
//
// # What the token may do
//
// Once a token is there, the pages ask the API what it may do (GET
// /v1/whoami) and say it in the header: with the viewer token they read
// every page but take every element marked data-operator out (the action
// buttons, the rebuild option, the confirmation dialog), as a read-only
// instance's pages are; the operator token keeps them; the ingest token,
// which may only write events, is asked to be replaced. The API refuses
// the actions to any token but the operator's (403) all the same: the
// pages only show what it allows.
//
// # Accessibility
//
// Real links and buttons, labelled fields, visible focus, a skip link,
// captions and header cells on tables, states written as words (colour
// only adds to them), charts with a text summary, a confirmation dialog
// (the native <dialog>) before every drop and bulk action, results
// announced in status regions, and a layout that reflows to a phone's
// width. The overview refreshes itself every few seconds and can be
// paused.
package console
