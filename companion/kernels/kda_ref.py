"""Float64 reference of Kimi Delta Attention: the naive per-token recurrence (FLA `fla/ops/kda/naive.py`).

Per head, with state S (K x V): S <- S * exp(g_t)[:, None]; S <- S + beta_t k_t (v_t - k_t^T S)^T;
o_t = scale * q_t^T S, scale = K^-1/2 by default. Keys are expected L2-normalised by the caller, as FLA's
KDA layer does (`use_qk_l2norm_in_kernel`); nothing is normalised here or in the kernels.
"""

from __future__ import annotations

import torch


def kda_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    state: torch.Tensor, scale: float | None = None, keep_states: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(o [B,T,H,V], final state [B,H,K,V], every token's state [B,T,H,K,V] or None), all float64.

    q, k: [B,T,H,K]; v: [B,T,H,V]; g: [B,T,H,K] log gates (<= 0); beta: [B,T,H]; state: [B,H,K,V].
    """
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    s = state.double().clone()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    outs, states = [], []
    for t in range(q.shape[1]):
        s = s * g[:, t].exp()[..., None]
        predicted = torch.einsum("bhk,bhkv->bhv", k[:, t], s)
        s = s + torch.einsum("bhk,bhv->bhkv", beta[:, t, :, None] * k[:, t], v[:, t] - predicted)
        outs.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], s))
        if keep_states:
            states.append(s)
    return torch.stack(outs, dim=1), s, (torch.stack(states, dim=1) if keep_states else None)
