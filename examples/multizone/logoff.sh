#!/bin/sh
# logoff.sh USER [PORT]: log on as USER through the broker on
# 127.0.0.1:PORT (default 8101) and log off every session USER has, printing
# the machine of each. The password is $DEMO_PASSWORD (run.sh's default).
set -eu
user=$1 port=${2:-8101}
password=${DEMO_PASSWORD:-multizone-demo}
base=http://127.0.0.1:$port/api/v1
token=$(curl -fsS -H 'Content-Type: application/json' -d "{\"username\":\"$user\",\"password\":\"$password\"}" "$base/login" |
	sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
curl -fsS -H "Authorization: Bearer $token" "$base/sessions" | grep -o '"id": *"[^"]*"\|"machine": *"[^"]*"' |
	sed 's/.*: *"\(.*\)"/\1/' | paste - - | while read -r id machine; do
	curl -fsS -X POST -H "Authorization: Bearer $token" "$base/sessions/$id/logoff" >/dev/null
	echo "logged off $user's session on $machine"
done
