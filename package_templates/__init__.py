# Jinja2 templates of the files inside packages (headers, tool files, build-system files, C++ harnesses),
# installed as the package tfaot_dist.package_templates. Their digest is part of every build key.
