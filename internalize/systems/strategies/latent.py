"""Router, generator and posterior over a frozen base GPT: the latent-strategies factorisation.

Two LoRA-adapted copies of the base (through `peft`): the first is the router r(z|x) and the
generator g(y|x,z) (shared parameters), the second the posterior q(z|x,y). The frozen base is
the first copy with its adapter disabled: the reference p_theta. Both Gaussian heads read the
final hidden state (after the last LayerNorm) of one token: the router the `<z>` that ends the
prompt `<bos><x>...</x><z>`, the posterior the `<eos>` of the whole framed (x, y). E(z), a
linear map, is added to the embedding at the `<z_empty>` slot (onward: there and at every
position after it, so each response token reads z in its own embedding). The LoRA B matrices and every
head start at zero, so before training the generator is the base exactly and both Gaussians are
standard normal.
"""
from __future__ import annotations

import copy

import torch
from peft import LoraConfig, get_peft_model
from torch import nn

from internalize.models.gpt import Inject
from internalize.systems.strategies.hf import peft_quietly

LOGVAR_CLAMP = 8.0  # log-variances are clamped to [-8, 8]
GPT_TARGETS = ("qkv", "proj", "fc_in", "fc_out")  # every linear layer of the toolkit GPT's blocks


class Gaussian(nn.Module):
    """A diagonal Gaussian head: hidden (B, width) -> mean, log-variance (B, d_z)."""

    def __init__(self, width: int, d_z: int):
        super().__init__()
        self.linear = nn.Linear(width, 2 * d_z)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, logvar = self.linear(hidden).chunk(2, dim=-1)
        return mean, logvar.clamp(-LOGVAR_CLAMP, LOGVAR_CLAMP)


def gaussian_kl(q: tuple[torch.Tensor, torch.Tensor], r: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """KL(q || r) of diagonal Gaussians given as (mean, log-variance), summed over the last dim: (B,)."""
    (mq, lq), (mr, lr) = q, r
    return 0.5 * (lr - lq + (lq.exp() + (mq - mr) ** 2) / lr.exp() - 1).sum(-1)


def draw(params: tuple[torch.Tensor, torch.Tensor], generator: torch.Generator | None = None) -> torch.Tensor:
    """A reparameterised sample of a diagonal Gaussian (mean, log-variance)."""
    mean, logvar = params
    device = mean.device if generator is None else generator.device  # a generator draws on its own device
    noise = torch.randn(mean.shape, generator=generator, device=device, dtype=mean.dtype).to(mean.device)
    return mean + (0.5 * logvar).exp() * noise


def share_frozen(source: nn.Module, target: nn.Module) -> int:
    """Point each frozen parameter of `target` at the storage of `source`'s parameter of the same name
    where both are frozen and equal (copies of one frozen base): the generator and the posterior, and
    the runs of a stack, then hold one copy of the base's weights (a pretrained model's size once,
    not twice a run). Values are unchanged, and so is every result. Returns how many were shared."""
    theirs = dict(source.named_parameters())
    shared = 0
    with torch.no_grad():
        for name, p in target.named_parameters():
            q = theirs.get(name)
            if (q is not None and q is not p and not p.requires_grad and not q.requires_grad
                    and q.shape == p.shape and q.dtype == p.dtype and torch.equal(p, q)):
                p.data = q.data
                shared += 1
    return shared


class Factorization(nn.Module):
    def __init__(self, base: nn.Module, d_z: int, rank: int, alpha: float, targets: list[str] | None = None,
                 onward: bool = False):
        """base: the toolkit's GPT or an HFCausalLM; targets: the layer names LoRA adapts (None: every
        linear layer of the blocks); onward: E(z) at the slot and every position after it."""
        super().__init__()
        self.base_cfg = base.cfg
        base = copy.deepcopy(base).requires_grad_(False)
        if targets is None:
            targets = base.lora_targets() if hasattr(base, "lora_targets") else list(GPT_TARGETS)
        config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets), lora_dropout=0.0, bias="none",
                            fan_in_fan_out=getattr(base, "conv1d", False))
        with peft_quietly():
            self.generator = get_peft_model(copy.deepcopy(base), config)
            self.posterior = get_peft_model(base, copy.deepcopy(config))
        width = base.cfg.width
        self.router_head = Gaussian(width, d_z)
        self.posterior_head = Gaussian(width, d_z)
        self.embed_z = nn.Linear(d_z, width, bias=False)
        nn.init.zeros_(self.embed_z.weight)
        self.d_z = d_z
        self.onward = onward

    def learnable(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    @staticmethod
    def _run(model, idx: torch.Tensor, mask: torch.Tensor | None, inject: Inject | None):
        """Logits (B, T, V) and the final hidden states (B, T, width) of a (peft-wrapped) backbone."""
        return model.features(idx, attention_mask=mask, inject=inject)

    @staticmethod
    def _at(hidden: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), index]  # (B, width)

    def inject(self, slots: torch.Tensor, z: torch.Tensor) -> Inject:
        return Inject(slots, self.embed_z(z), self.onward)

    def router(self, idx: torch.Tensor, z_at: torch.Tensor, mask: torch.Tensor | None = None):
        """r(z|x): (mean, log-variance) from the hidden state at `<z>` (index z_at (B,)); tokens after
        it do not matter (causal attention)."""
        _, hidden = self._run(self.generator, idx, mask, None)
        return self.router_head(self._at(hidden, z_at))

    def posterior_params(self, idx: torch.Tensor, end_at: torch.Tensor, mask: torch.Tensor | None = None):
        """q(z|x,y): (mean, log-variance) from the hidden state at the framed sequence's last token."""
        _, hidden = self._run(self.posterior, idx, mask, None)
        return self.posterior_head(self._at(hidden, end_at))

    def generate_pass(self, idx: torch.Tensor, z: torch.Tensor, slots: torch.Tensor, z_at: torch.Tensor,
                      mask: torch.Tensor | None = None):
        """One pass of the generator with E(z) at `slots`: its logits (B, T, V) and, from the same pass,
        the router's (mean, log-variance) at `<z>` (which comes before the slot, so z cannot reach it)."""
        logits, hidden = self._run(self.generator, idx, mask, self.inject(slots, z))
        return logits, self.router_head(self._at(hidden, z_at))

    @torch.no_grad()
    def reference_logits(self, idx: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The frozen base p_theta: the generator's copy with its adapter disabled, nothing injected."""
        with self.generator.disable_adapter():
            logits, _ = self.generator.get_base_model()(idx, attention_mask=mask)
        return logits

