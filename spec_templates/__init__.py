# Jinja2 templates of tfaot-dist, installed as the package tfaot_dist.spec_templates.
