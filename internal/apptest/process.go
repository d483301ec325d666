package apptest

func (s *System) ProcessEnv(extra map[string]string) map[string]string {
	env := map[string]string{}
	for k, v := range s.Vars {
		env[k] = v
	}
	env["DATABASE_URL"] = s.ServiceURL
	env["BUILDRISK_ADMIN_ADDR"] = "127.0.0.1:0"
	env["BUILDRISK_LOG_FORMAT"] = "text"
	env["BUILDRISK_UPSTREAM_URL"] = s.FakeURL
	for k, v := range extra {
		env[k] = v
	}
	return env
}
