"""Built-in paijob job templates (``*.yaml.j2``) and their default values.

Shipped as the package ``paijob.templates`` so an installed paijob finds them
without the source checkout.
"""
