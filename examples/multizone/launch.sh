#!/bin/sh
# launch.sh USER RESOURCE [PORT]: log on as USER through the broker on
# 127.0.0.1:PORT (default 8101), launch RESOURCE, and print where the
# session went, or why it did not. The password is $DEMO_PASSWORD
# (run.sh's default).
set -eu
user=$1 resource=$2 port=${3:-8101}
password=${DEMO_PASSWORD:-multizone-demo}
base=http://127.0.0.1:$port/api/v1
token=$(curl -fsS -H 'Content-Type: application/json' -d "{\"username\":\"$user\",\"password\":\"$password\"}" "$base/login" |
	sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
[ -n "$token" ] || { echo "$user could not log on through 127.0.0.1:$port" >&2; exit 1; }
answer=$(curl -sS -w '\nHTTP %{http_code}' -X POST -H "Authorization: Bearer $token" -H "Accept: application/json" "$base/resources/$resource/launch")
said=$(printf '%s\n' "$answer" | grep -o '"machine": *"[^"]*"\|"code": *"[^"]*"\|"message": *"[^"]*"' | tr '\n' ' ') || true
# An answer without those fields is shown whole.
echo "${said:-$answer}"
