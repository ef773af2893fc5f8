# Jinja2 templates of the packaging specs (cmsBuild, rpm) and CMSDIST tool files, installed as the
# package tfaot_dist.spec_templates. Changes here raise the specs' Release (specs/release.py); package
# templates are in package_templates/.
