// Package deploy holds buildrisk-radar's deployment files and the tests that
// keep them honest; it has no Go code of its own.
//
//   - Dockerfile: one image for every role (BUILDRISK_ROLE or a subcommand).
//   - compose.yaml: PostgreSQL, migrate, api, two workers (stop_grace_period
//     60s for the drain), the fake upstream, Prometheus and Grafana.
//   - k8s/: api and worker Deployments, Services, the migrate Job, ConfigMap
//     and Secrets (provider keys only for the worker), and the workers'
//     PodDisruptionBudget.
//   - prometheus/: the scrape config, the alert rules and their promtool
//     unit tests.
//   - grafana/: the provisioned datasource, dashboard and alert rules.
//   - pack/: the observability pack as code (package pack): the alert rules
//     written once and the dashboard built with the Grafana Foundation SDK;
//     it generates prometheus/rules.yml, the Grafana alert rules and the
//     dashboard JSON (make generate), and its test fails when they are stale.
//
// The tests, one file per product: prometheus_test.go runs promtool on the
// rules when it is on PATH (and fails without it when
// BUILDRISK_REQUIRE_PROMTOOL=1) and checks the scrape config and rules;
// grafana_test.go checks the fields Grafana's provisioning loader requires;
// deploy_test.go checks that every metric name used by a rule, alert or
// panel is one of observability.MetricNames, so renaming an instrument can't
// silently blind an alert. compose_test.go and kubernetes_test.go check that
// the deploy files set only variables docs/configuration.md lists, and
// dockerfile_test.go that the Dockerfile builds with the Makefile's
// BUILD_ENV and BUILD_FLAGS (what CI builds with). alerting_test.go and
// dashboard_lint_test.go check the alert routing and the dashboard, and
// progress_test.go the build progress `make run` shows.
//
// validate/ is a Go module of its own: it builds k8s/ with kustomize's
// library, decodes every object strictly into the Kubernetes API types, and
// loads compose.yaml with the Compose Specification's loader.
package deploy
