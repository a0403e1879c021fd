#!/bin/sh
# The official nginx image's template step (docker-entrypoint.d/20-envsubst-on-templates.sh):
# every /etc/nginx/templates/*.template is rendered into /etc/nginx/conf.d/ without the suffix,
# by envsubst restricted to the variables defined in the environment, so nginx's own $variables
# are left as they are. Then the command runs.
set -eu
template_dir=${NGINX_ENVSUBST_TEMPLATE_DIR:-/etc/nginx/templates}
suffix=${NGINX_ENVSUBST_TEMPLATE_SUFFIX:-.template}
output_dir=${NGINX_ENVSUBST_OUTPUT_DIR:-/etc/nginx/conf.d}
if [ "${1:-}" = nginx ] && [ -d "$template_dir" ]; then
  defined_envs=$(printf '${%s} ' $(env | cut -d= -f1))
  for template in "$template_dir"/*"$suffix"; do
    [ -f "$template" ] || continue
    name=$(basename "$template" "$suffix")
    echo "docker-entrypoint: rendering $template to $output_dir/$name" >&2
    envsubst "$defined_envs" <"$template" >"$output_dir/$name"
  done
fi
exec "$@"
